"""``pipeline.text_encoder: sharded`` against its memory estimate: each kind of text encoder the generic
families use (T5 with its tied tables, Llama, CLIP with projection, Qwen2.5-VL with its vision tower),
six layers, sharded over 4 gloo ranks with ``runtime/pipelines/text.shard_encoder``, encodes a prompt's
ids as the unsharded encoder does (the hidden states the pipelines read), and the most parameter bytes
a rank holds at any unit's start or end (``encoder_peak``) stay within the planner's
``sharded_encoder_bytes``: 1/4 of the encoder plus the largest table or two of the largest layer.
T5's tied ``shared`` / ``embed_tokens`` unit, which FSDP2 alone keeps gathered until the encoder's end
(``shared`` never runs), is resharded after its own forward; Qwen2.5-VL's vision tower is never
gathered."""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from sporch.orchestrator.plan.pipeline_estimate import sharded_encoder_bytes  # noqa: E402
from sporch.runtime.testing import run_distributed  # noqa: E402

RANKS = 4
#: T5's vocabulary table (128 K entries) outweighs two of its layers: what is gathered at most is it alone
VOCAB = 2048


def _encoders() -> dict:
    from transformers import (CLIPTextConfig, CLIPTextModelWithProjection, LlamaConfig, LlamaModel, Qwen2_5_VLConfig,
                              Qwen2_5_VLForConditionalGeneration, T5Config, T5EncoderModel)

    torch.manual_seed(0)
    return {
        "t5": T5EncoderModel(T5Config(vocab_size=VOCAB, d_model=64, d_kv=16, d_ff=256, num_layers=6, num_heads=4,
                                      feed_forward_proj="gated-gelu")),
        "llama": LlamaModel(LlamaConfig(vocab_size=512, hidden_size=64, intermediate_size=256, num_hidden_layers=6,
                                        num_attention_heads=4, num_key_value_heads=2)),
        "clip": CLIPTextModelWithProjection(CLIPTextConfig(vocab_size=512, hidden_size=64, intermediate_size=256,
                                                           num_hidden_layers=6, num_attention_heads=4,
                                                           projection_dim=32)),
        "qwen2.5-vl": Qwen2_5_VLForConditionalGeneration(Qwen2_5_VLConfig(
            text_config=dict(vocab_size=512, hidden_size=64, intermediate_size=256, num_hidden_layers=6,
                             num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
                             rope_scaling={"type": "mrope", "mrope_section": [2, 3, 3]}),
            vision_config=dict(depth=6, hidden_size=64, intermediate_size=256, num_heads=4, out_hidden_size=64,
                               patch_size=2, spatial_merge_size=1, temporal_patch_size=1),
            vocab_size=512, tie_word_embeddings=False)),
    }


def _shard_and_encode():
    import torch.distributed as dist
    from torch.distributed.device_mesh import DeviceMesh

    from sporch.runtime.models.shard_weights import resident_parameter_bytes
    from sporch.runtime.pipelines.text import encoder_peak, encoder_units, shard_encoder

    mesh = DeviceMesh.from_group(dist.group.WORLD, "cpu")
    ids = torch.randint(3, 500, (1, 24), generator=torch.Generator().manual_seed(1))
    out = {}
    for name, enc in _encoders().items():
        enc.eval()
        lists, _ = encoder_units(enc)
        facts = {"text_encoder_parameters": sum(p.numel() for p in enc.parameters()),
                 "text_encoder_embedding": max(p.numel() for p in enc.parameters()),
                 "text_encoder_layers": sum(len(layers) for layers in lists),
                 "text_encoder_layer": max(sum(p.numel() for p in m.parameters()) for layers in lists for m in layers)}
        with torch.no_grad():
            want = enc(input_ids=ids, output_hidden_states=True).hidden_states
            shard_encoder(enc, mesh)
            with encoder_peak([enc]) as peak:
                got = enc(input_ids=ids, output_hidden_states=True).hidden_states
        out[name] = {"err": max(float((a - b).abs().max()) for a, b in zip(got, want)), "states": len(got),
                     "scale": float(want[-1].abs().max()), "peak": peak.bytes,
                     "resident": resident_parameter_bytes(enc), "facts": facts}
    return out


def test_sharded_encoders_encode_exactly_within_their_estimate():
    ranks = run_distributed(_shard_and_encode, RANKS, timeout=300)
    for name in ranks[0]:
        for rank, r in enumerate(rank_out[name] for rank_out in ranks):
            total, estimate = r["facts"]["text_encoder_parameters"] * 4, sharded_encoder_bytes(r["facts"], 4, RANKS)
            print(f"{name} rank {rank}: max abs error {r['err']:.3g}, resident {r['resident']}, peak {r['peak']}, "
                  f"estimate {estimate} of {total} bytes")
            assert r["states"] == 7 and r["scale"] > 0.1, (name, r)  # the hidden states, the encoding real
            assert r["err"] <= 1e-6, (name, rank, r["err"])
            assert r["resident"] <= math.ceil(total / RANKS) + 64 * 4, (name, r)  # 1/4 (+ FSDP2's row padding)
            assert r["resident"] < r["peak"] <= estimate, (name, rank, r["peak"], estimate)
