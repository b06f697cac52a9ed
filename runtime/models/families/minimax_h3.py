"""MiniMax-H3 on the one model path: one packed sequence of text, audio and video rows (the layout
MiniMaxH3Blocks packs: the text block, the audio rows, the video rows), each row tagged with its
modality and its timestep; the packed sequence is split over the sequence ranks at the first block."""

from __future__ import annotations

import torch

#: heads x head width (32) wider than the residual stream (24), as the published config (7168 / 5376)
TINY = dict(num_attention_heads=4, attention_head_dim=8, hidden_size=24, num_layers=2, num_refiner_layers=1,
            ffn_dim=32, in_channels=4, audio_in_channels=6, patch_size=(1, 2, 2), text_dim=16, freq_dim=8,
            time_embed_hidden_dim=24, time_embed_dim=16, rope_freq_dim=1)
#: audio rows per latent video frame in the random jobs
AUDIO_PER_FRAME = 2

#: forward arguments with one row per sample (CFG parallel splits the doubled batch by them; the
#: layout's index tensors describe every row alike)
BATCHED = ("hidden_states", "audio_hidden_states", "encoder_hidden_states")


def packed_layout(grid, text_len: int, audio: int) -> dict:
    """The structural arguments of one packed sequence [text, audio, video]: the rows' modality tags
    (0 video, 1 text, 2 audio), their timestep (video and text the first, audio the second), (t, h, w)
    rotary coordinates and the three index tensors."""
    f, h, w = grid
    video = f * h * w
    n = text_len + audio + video
    text_i, audio_i = torch.arange(text_len), torch.arange(text_len, text_len + audio)
    video_i = torch.arange(text_len + audio, n)
    tags = torch.empty(n, dtype=torch.long)
    tags[text_i], tags[audio_i], tags[video_i] = 1, 2, 0
    steps = torch.zeros(n, dtype=torch.long)
    steps[audio_i] = 1
    pos = torch.zeros(n, 3)
    pos[text_i, 0] = torch.arange(text_len, dtype=torch.float32)
    pos[audio_i, 0] = torch.arange(audio, dtype=torch.float32)
    grid_t, grid_h, grid_w = torch.meshgrid(torch.arange(f), torch.arange(h), torch.arange(w), indexing="ij")
    pos[video_i] = torch.stack([grid_t.flatten(), grid_h.flatten(), grid_w.flatten()], dim=-1).float()
    return dict(timestep_indices=steps, token_tags=tags, position_ids=pos, video_indices=video_i,
                audio_indices=audio_i, text_indices=text_i)


def inputs(config, *, batch, grid, text_len, generator, dtype=torch.float32):
    f, h, w = grid
    audio = AUDIO_PER_FRAME * f + 1
    pt, ph, pw = config.get("patch_size", (1, 2, 2))
    patch = config["in_channels"] * pt * ph * pw
    return dict(
        hidden_states=torch.randn(batch, f * h * w, patch, generator=generator).to(dtype),
        audio_hidden_states=torch.randn(batch, audio, config["audio_in_channels"], generator=generator).to(dtype),
        encoder_hidden_states=torch.randn(batch, text_len, config["text_dim"], generator=generator).to(dtype),
        timestep=torch.rand(2, generator=generator).to(dtype), **packed_layout(grid, text_len, audio),
        return_dict=False)
