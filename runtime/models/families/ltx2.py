"""LTX-2 on the one model path: video latent tokens (one per latent pixel) split over the sequence ranks,
the audio stream (latent frames of mel bins) whole on every rank; Gemma text states (from the
pipeline's connectors) for video and audio, with their mask."""

from __future__ import annotations

import torch

#: LTX-2.0's layout (prompt projections, no gates): video 4 heads x 8, audio 4 heads x 4 (the same head
#: count: the video-to-audio attention is split over the Ulysses ranks as the video's is), split RoPE
TINY = dict(in_channels=8, out_channels=8, patch_size=1, patch_size_t=1, num_attention_heads=4, attention_head_dim=8,
            cross_attention_dim=32, audio_in_channels=4, audio_out_channels=4, audio_num_attention_heads=4,
            audio_attention_head_dim=4, audio_cross_attention_dim=16, num_layers=2, caption_channels=16,
            rope_type="split", rope_double_precision=True)
#: LTX-2.3 / 2.5's blocks on top (gated attention, prompt modulation, perturbed-attention processors, text
#: states already at the streams' widths)
TINY_23 = dict(gated_attn=True, cross_attn_mod=True, audio_gated_attn=True, audio_cross_attn_mod=True,
               use_prompt_embeddings=False, perturbed_attn=True)
#: audio latent frames per video latent frame in the random jobs (LTX-2: 25 audio latents a second, 24 fps
#: video over 8-frame latents: about 8)
AUDIO_PER_FRAME = 3

#: forward arguments with one row per sample (CFG parallel splits the doubled batch by them)
BATCHED = ("hidden_states", "audio_hidden_states", "encoder_hidden_states", "audio_encoder_hidden_states",
           "timestep", "audio_timestep", "sigma", "audio_sigma", "encoder_attention_mask",
           "audio_encoder_attention_mask", "video_coords", "audio_coords", "perturbation_mask")


def text_widths(config) -> tuple[int, int]:
    """The widths of the video and audio text states the transformer takes: the caption's (it
    projects them, LTX-2.0) or the streams' own (LTX-2.3 on: the pipeline's connectors project)."""
    if config.get("use_prompt_embeddings", True):
        return int(config.get("caption_channels", 3840)), int(config.get("caption_channels", 3840))
    return (int(config["num_attention_heads"]) * int(config["attention_head_dim"]),
            int(config["audio_num_attention_heads"]) * int(config["audio_attention_head_dim"]))


def inputs(config, *, batch, grid, text_len, generator, dtype=torch.float32):
    f, h, w = grid
    video_text, audio_text = text_widths(config)
    t = (torch.rand(batch, generator=generator) * 1000).to(dtype)
    return dict(
        hidden_states=torch.randn(batch, f * h * w, config["in_channels"], generator=generator).to(dtype),
        audio_hidden_states=torch.randn(batch, AUDIO_PER_FRAME * f + 1, config["audio_in_channels"],
                                        generator=generator).to(dtype),
        encoder_hidden_states=torch.randn(batch, text_len, video_text, generator=generator).to(dtype),
        audio_encoder_hidden_states=torch.randn(batch, text_len, audio_text, generator=generator).to(dtype),
        timestep=t, sigma=t, encoder_attention_mask=torch.ones(batch, text_len, dtype=dtype),
        audio_encoder_attention_mask=torch.ones(batch, text_len, dtype=dtype),
        num_frames=f, height=h, width=w, audio_num_frames=AUDIO_PER_FRAME * f + 1, fps=24.0,
        use_cross_timestep=True, return_dict=False)
