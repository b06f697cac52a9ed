"""From a prompt to a video or an image: text encoders, scheduler and VAE around the sharded
transformer (``workload.kind: generate``; docs/generate.md).

Hugging Face transformers supplies the text encoders, diffusers the schedulers, VAEs and the
pipelines' own prompt encoding and post-processing; sporch's sharded DiT replaces only the
transformer call. One module per job:

* ``params.py``     the generate parameters (GenerateParams), read from the Plan in one place
* ``phase_timing.py`` seconds and peak memory per phase (encode, load, denoise, decode, save)
* ``text.py``       prompt encoding on one rank per dp replica, broadcast over the replica
* ``schedulers.py`` the scheduler and its timesteps, as the diffusers pipelines set them up
* ``vae.py``        latents -> frames on one rank per dp replica
* ``vae_parallel/`` the exact row-parallel decode (``pipeline.vae: parallel``): the latent's
  rows split over a group (``bands``), halo convolutions (``conv_geometry``, ``halo_conv``),
  whole-image group norms (``group_norm``), gathered attention (``gathered_attention``), the
  decoder's modules replaced in a copy (``surgery``), the entry points (``decode``)
* ``media.py``      MP4 / PNG writing and reading (imageio)
* ``generate.py``   the workload
* ``tiny.py``       tiny random Wan2.1 / Flux.1 pipelines in the publishers' layout (tests, examples)
"""
