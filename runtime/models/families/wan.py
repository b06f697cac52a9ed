"""Wan2.1 / Wan2.2 on the one path: latents [B, C, F, H, W], umT5 text (whole on every rank), and for
generate ``WanPipeline`` / ``WanImageToVideoPipeline`` (Wan2.1 I2V's CLIP image tokens encoded once
by the replica's leader with the text; Wan2.2 A14B's two experts; TI2V-5B's per-token timesteps)."""

from __future__ import annotations

import math
from typing import Any, Mapping

import torch

from sporch.orchestrator.models.families.wan import TINY as TINY_PRESET
from sporch.runtime.models.tiny_parts import randomize, t5_config, tiny_tokenizer, VOCAB

from sporch.runtime.models.build import random_diffusers

#: the test model's transformer config (the ``tiny`` preset's)
TINY = dict(TINY_PRESET)

#: forward arguments with one row per sample (CFG parallel splits the doubled batch by them)
BATCHED = ("hidden_states", "timestep", "encoder_hidden_states", "encoder_hidden_states_image")


def inputs(config, *, batch, grid, text_len, generator, dtype=torch.float32, image_tokens: int | None = None):
    """Random forward arguments of a Wan-style class (ChronoEdit and Wan VACE take them too);
    ``image_tokens``: the CLIP image tokens of an I2V config (default :data:`IMAGE_TOKENS_TINY`)."""
    f, h, w = grid
    pt, ph, pw = config.get("patch_size", (1, 2, 2))
    out = dict(
        hidden_states=torch.randn(batch, config["in_channels"], f * pt, h * ph, w * pw, generator=generator).to(dtype),
        timestep=(torch.rand(batch, generator=generator) * 1000).to(dtype),
        encoder_hidden_states=torch.randn(batch, text_len, config["text_dim"], generator=generator).to(dtype),
        return_dict=False)
    if config.get("image_dim"):  # Wan2.1 I2V: CLIP image tokens beside the text
        out["encoder_hidden_states_image"] = torch.randn(batch, image_tokens or IMAGE_TOKENS_TINY, config["image_dim"],
                                                         generator=generator).to(dtype)
    return out


#: CLIP image tokens of a random I2V job (the published encoder gives 257; any count runs)
IMAGE_TOKENS_TINY = 17


def encode(pipe, prompt: str, *, negative: str | None, cfg: bool, text_len: int, device,
           image: Any = None) -> dict[str, Any]:
    """The pipeline's ``encode_prompt`` at the plan's text length (the negative prompt's too with
    CFG: "" when unset, the call's default), and with an image for a transformer that takes CLIP
    image tokens (Wan2.1 I2V) the pipeline's ``encode_image``: the call's embedding arguments."""
    pe, npe = pipe.encode_prompt(prompt, negative_prompt=negative or "", do_classifier_free_guidance=cfg,
                                 max_sequence_length=text_len, device=device)
    out = {"prompt_embeds": pe}
    if cfg:
        out["negative_prompt_embeds"] = npe
    transformer = pipe.transformer if pipe.transformer is not None else pipe.transformer_2
    if image is not None and transformer.config.image_dim is not None:
        out["image_embeds"] = pipe.encode_image(image, device)
    return out


class _GivenImageTokens(torch.nn.Module):
    """The image-encoder slot of a WanImageToVideoPipeline whose CLIP image tokens the replica's
    leader encoded with the prompt (:func:`encode`): the pipeline's own ``encode_image`` reads them
    from it (its ``hidden_states[-2]``), since the call refuses ``image_embeds`` beside the ``image``
    its first-frame latent condition needs."""

    def __init__(self, tokens: torch.Tensor) -> None:
        super().__init__()
        self.register_buffer("tokens", tokens, persistent=False)

    @property
    def device(self) -> torch.device:  # what the pipeline asks of its modules
        return self.tokens.device

    @property
    def dtype(self) -> torch.dtype:
        return self.tokens.dtype

    def forward(self, **_: Any) -> Any:
        from types import SimpleNamespace

        return SimpleNamespace(hidden_states=[self.tokens, self.tokens])


class _GivenImage(dict):
    """The image processor's output for :class:`_GivenImageTokens` (nothing to process)."""

    def to(self, *_: Any) -> "_GivenImage":
        return self


def hand_embeddings(pipe, embeds: dict[str, Any]) -> dict[str, Any]:
    """The call's embedding arguments: the prompt's as they are; Wan2.1 I2V's CLIP tokens handed to
    the pipeline through its image-encoder slot (:class:`_GivenImageTokens`), not as ``image_embeds``."""
    if "image_embeds" not in embeds:
        return embeds
    out = dict(embeds)
    pipe.image_encoder = _GivenImageTokens(out.pop("image_embeds"))
    pipe.image_processor = lambda images=None, return_tensors=None: _GivenImage()
    return out


def call_arguments(*, guidance_scale: float, cfg: bool, text_len: int) -> dict[str, Any]:
    """CFG as two calls per step (``guidance_scale`` > 1 turns it on); the plan's text length."""
    return {"guidance_scale": guidance_scale if cfg else 1.0, "max_sequence_length": text_len}


def tiny_pipeline(seed: int = 0, config: Mapping[str, Any] | None = None, *, text_len: int = 8,
                  vae_stride: tuple[int, int, int] = (4, 8, 8), boundary_ratio: float | None = None,
                  expand_timesteps: bool = False):
    """A WanPipeline (or, for a transformer with more input than output channels, a
    WanImageToVideoPipeline) whose transformer has ``config`` (default: the tiny preset's): a tiny
    umT5 ``config["text_dim"]`` wide, AutoencoderKLWan folding ``vae_stride`` (the Wan2.2 VAE of TI2V-5B
    with ``expand_timesteps``: 2 x 2 pixels into channels first, residual blocks), UniPC with flow
    sigmas (Wan2.1's scheduler folder). ``boundary_ratio``: Wan2.2 A14B's second expert
    (``transformer_2``, other random weights) switched there; a transformer with ``image_dim``
    (Wan2.1 I2V) gets a tiny CLIP image encoder and its processor."""
    from diffusers import AutoencoderKLWan, UniPCMultistepScheduler, WanImageToVideoPipeline, WanPipeline
    from transformers import UMT5Config, UMT5EncoderModel


    config = dict(config or TINY)
    transformer = random_diffusers("WanTransformer3DModel", config, seed=seed)
    two = {} if boundary_ratio is None else {
        "transformer_2": random_diffusers("WanTransformer3DModel", config, seed=seed + 7),
        "boundary_ratio": float(boundary_ratio)}
    channels = int(config.get("out_channels") or config["in_channels"])
    text_encoder = randomize(UMT5EncoderModel(t5_config(UMT5Config, VOCAB, int(config["text_dim"]))), seed + 3)
    st, sh, _ = (int(s) for s in vae_stride)
    wan22 = {"is_residual": True, "patch_size": 2, "in_channels": 12, "out_channels": 12} if expand_timesteps else {}
    downs = int(math.log2(sh)) - (1 if wan22 else 0)
    temporal = [False] * (downs - int(math.log2(st))) + [True] * int(math.log2(st))
    g = torch.Generator().manual_seed(seed + 1)
    vae = AutoencoderKLWan(base_dim=8, z_dim=channels, dim_mult=[1] * (downs + 1), num_res_blocks=1,
                           temperal_downsample=temporal, scale_factor_temporal=st, scale_factor_spatial=sh,
                           latents_mean=(0.2 * torch.randn(channels, generator=g)).tolist(),
                           latents_std=(1.0 + 0.5 * torch.rand(channels, generator=g)).tolist(), **wan22).eval()
    scheduler = UniPCMultistepScheduler(prediction_type="flow_prediction", use_flow_sigmas=True,
                                        num_train_timesteps=1000, flow_shift=3.0)
    parts = dict(tokenizer=tiny_tokenizer(text_len), text_encoder=text_encoder, vae=vae, scheduler=scheduler,
                 transformer=transformer, **two)
    if expand_timesteps:
        parts["expand_timesteps"] = True
    if channels < int(config["in_channels"]):  # image-to-video: the first frame as latent condition
        encoder, processor = tiny_image_encoder(int(config["image_dim"]), seed + 2) if config.get("image_dim") \
            else (None, None)
        return WanImageToVideoPipeline(image_encoder=encoder, image_processor=processor, **parts)
    return WanPipeline(**parts)


#: The tiny CLIP image encoder's input: 32 x 32 pixels in 8 x 8 patches, so 16 + 1 image tokens.
CLIP_IMAGE_SIZE, CLIP_PATCH = 32, 8


def tiny_image_encoder(width: int, seed: int):
    """Wan2.1 I2V's image encoder parts, tiny: a CLIPVisionModel whose hidden states are ``width``
    wide (the transformer's ``image_dim``; two layers, as the pipeline reads the penultimate
    hidden states) and the CLIPImageProcessor that resizes, centre-crops and normalises for it."""
    from transformers import CLIPImageProcessor, CLIPVisionConfig, CLIPVisionModel

    encoder = randomize(CLIPVisionModel(CLIPVisionConfig(
        hidden_size=width, intermediate_size=2 * width, num_hidden_layers=2, num_attention_heads=4,
        image_size=CLIP_IMAGE_SIZE, patch_size=CLIP_PATCH, projection_dim=width)), seed)
    processor = CLIPImageProcessor(size={"shortest_edge": CLIP_IMAGE_SIZE},
                                   crop_size={"height": CLIP_IMAGE_SIZE, "width": CLIP_IMAGE_SIZE})
    return encoder, processor


def decode_latents(pipe, latents: torch.Tensor, **_):
    """The pipeline's decode tail on its final latents (``sporch decode``): un-normalised per channel
    with the VAE's ``latents_mean`` / ``latents_std``, decoded, post-processed to float frames
    [B, F, H, W, 3] in [0, 1] as ``output_type="np"`` gives them."""
    vae = pipe.vae
    x = latents.to(vae.dtype)
    c = vae.config.z_dim
    mean = torch.tensor(vae.config.latents_mean).view(1, c, 1, 1, 1).to(x.device, x.dtype)
    inv_std = 1.0 / torch.tensor(vae.config.latents_std).view(1, c, 1, 1, 1).to(x.device, x.dtype)
    video = vae.decode(x / inv_std + mean, return_dict=False)[0]
    return pipe.video_processor.postprocess_video(video, output_type="np")
