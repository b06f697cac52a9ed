"""Entrypoint for the markup test: every rank fails with an error line shaped like gloo's, whose
``[/__w/...]`` rich would take for a closing markup tag."""

#: The error line (as gloo prints it from a CI build path).
GLOO_ERROR = ("[/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:534] Read error "
              "[127.0.0.1]:12345: Connection reset by peer [bold]x[/bold] [/]")


def raise_gloo_error(ctx, plan):
    raise RuntimeError(GLOO_ERROR)
