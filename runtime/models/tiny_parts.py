"""The small parts every tiny random pipeline is built from (runtime/pipelines/tiny.py for Wan and
Flux, each family's ``tiny_pipeline`` in runtime/models/families): a word-level
tokenizer, seeded random weights, a one-layer T5 config, a small 2-D ``AutoencoderKL``. No hub
access; every weight comes from a generator seeded by the caller.
"""

from __future__ import annotations

import math

import torch

WORDS = ("a an the of in on at with and under over red green blue white black small big cat dog fox "
         "bird fish horse car boat tree river sea sky sun moon snow rain city street forest mountain field "
         "running flying walking swimming sitting playing night day morning sunset slow fast camera shot "
         "blurry low quality bright dark").split()


def tiny_tokenizer(model_max_length: int):
    from tokenizers import Tokenizer, normalizers, pre_tokenizers, processors
    from tokenizers.models import WordLevel
    from transformers import PreTrainedTokenizerFast

    vocab = {"<pad>": 0, "</s>": 1, "<unk>": 2, **{w: i + 3 for i, w in enumerate(WORDS)}}
    tok = Tokenizer(WordLevel(vocab, unk_token="<unk>"))
    tok.normalizer = normalizers.Lowercase()
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.post_processor = processors.TemplateProcessing(single="$A </s>", pair="$A </s> $B </s>",
                                                       special_tokens=[("</s>", 1)])
    return PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", eos_token="</s>", unk_token="<unk>",
                                   model_max_length=model_max_length)


@torch.no_grad()
def randomize(module: torch.nn.Module, seed: int) -> torch.nn.Module:
    """Every parameter random (diffusers zero-initialises some): scaled normal weights, norm
    scales near 1, small biases."""
    g = torch.Generator().manual_seed(seed)
    for name, p in module.named_parameters():
        r = torch.randn(p.shape, generator=g)
        if p.dim() >= 2:
            p.copy_(r / math.sqrt(p.shape[-1] if "scale_shift_table" in name else p[0].numel()))
        elif name.endswith("weight") or name.endswith("scale"):
            p.copy_(1.0 + 0.2 * r)
        else:
            p.copy_(0.1 * r)
    return module.eval()


def t5_config(cls, vocab: int, d_model: int):
    return cls(vocab_size=vocab, d_model=d_model, d_kv=8, d_ff=2 * d_model, num_layers=1, num_heads=4,
               relative_attention_num_buckets=8, relative_attention_max_distance=16, pad_token_id=0,
               eos_token_id=1, decoder_start_token_id=0)


#: the tiny tokenizer's vocabulary size (:data:`WORDS` and three special tokens)
VOCAB = len(WORDS) + 3


def autoencoder_kl(latent_channels: int, seed: int):
    """diffusers' ``AutoencoderKL`` with three downsamples (8 x 8 pixels per latent), 8 channels wide,
    seeded; ``sample_size`` 32 makes ``enable_tiling``'s default tiles 32 pixels (4 x 4 latents,
    stride 3), so a 64 x 48 image is decoded in tiles."""
    from diffusers import AutoencoderKL

    vae = AutoencoderKL(in_channels=3, out_channels=3, down_block_types=["DownEncoderBlock2D"] * 4,
                        up_block_types=["UpDecoderBlock2D"] * 4, block_out_channels=[8, 8, 8, 8], layers_per_block=1,
                        latent_channels=latent_channels, norm_num_groups=4, sample_size=32, scaling_factor=1.5305,
                        shift_factor=0.0609)
    return randomize(vae, seed)
