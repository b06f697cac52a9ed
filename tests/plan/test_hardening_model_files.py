"""Bad model files are refused in one line at plan and inspect time (issue 32 items 6, 9, 10).

A checkpoint's config.json is validated in one place (models/checkpoint_config.py): every
value it reads has its type, range and finiteness checked, and the model they make together its
consistency (heads and head_dim, RoPE, channels), for ``sporch plan`` and ``sporch inspect`` alike.
A LoRA file's alphas (metadata, alpha tensors), flags, ranks and tensor values are checked the same
way (models/lora_file.py, models/lora_alpha.py, models/finite.py). The fuzz tests drive the real CLI in-process
over generated values: never an internal error, never exit 0 with a plan whose model the ranks
could not build or whose numbers are not finite.

The files are written as raw safetensors bytes (no torch needed to make them).
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import struct
from pathlib import Path
from typing import Any, Optional

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sporch.orchestrator.cli.main import main
from sporch.orchestrator.models.finite import count_nonfinite_bytes

FUZZ = settings(max_examples=30, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])

WAN = {"_class_name": "WanTransformer3DModel", "patch_size": [1, 2, 2], "num_attention_heads": 2,
       "attention_head_dim": 8, "in_channels": 4, "out_channels": 4, "text_dim": 12, "freq_dim": 16, "ffn_dim": 24,
       "num_layers": 2, "cross_attn_norm": True, "qk_norm": "rms_norm_across_heads", "eps": 1e-6,
       "rope_max_seq_len": 64, "image_dim": None, "added_kv_proj_dim": None}
FLUX = {"_class_name": "FluxTransformer2DModel", "patch_size": 1, "in_channels": 12, "num_layers": 2,
        "num_single_layers": 1, "attention_head_dim": 8, "num_attention_heads": 2, "joint_attention_dim": 12,
        "pooled_projection_dim": 8, "guidance_embeds": True, "axes_dims_rope": [2, 2, 4]}
WAN_ORIGINAL = {"model_type": "t2v", "dim": 16, "num_heads": 2, "num_layers": 2, "ffn_dim": 24, "in_dim": 4,
                "out_dim": 4, "patch_size": [1, 2, 2], "text_dim": 12, "freq_dim": 16, "eps": 1e-6, "text_len": 6,
                "qk_norm": True, "cross_attn_norm": True, "window_size": [-1, -1]}
CONFIGS = {"wan": WAN, "flux": FLUX, "wan-original": WAN_ORIGINAL}
LORA_MODULE = "blocks.0.attn1.to_q"  # a [16, 16] linear of the tiny Wan


# -- files -------------------------------------------------------------------------------------------
def safetensors_bytes(tensors: dict[str, tuple[str, list[int], bytes]], metadata: Optional[dict] = None) -> bytes:
    """A safetensors file of ``name -> (dtype, shape, raw bytes)``."""
    header: dict[str, Any] = {}
    offset, blobs = 0, []
    for name, (dtype, shape, raw) in tensors.items():
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + len(raw)]}
        offset += len(raw)
        blobs.append(raw)
    if metadata:
        header["__metadata__"] = metadata
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text + b"".join(blobs)


def f32(values: list[float]) -> bytes:
    return struct.pack(f"<{len(values)}f", *values)


def checkpoint(folder: Path, config: dict) -> Path:
    """A pipeline-layout folder: transformer/config.json and a one-tensor weights file."""
    (folder / "transformer").mkdir(parents=True)
    (folder / "transformer" / "config.json").write_text(json.dumps(config))
    (folder / "transformer" / "diffusion_pytorch_model.safetensors").write_bytes(
        safetensors_bytes({"patch_embedding.weight": ("F32", [2], f32([0.0, 1.0]))}))
    return folder


def lora_file(path: Path, rank: int = 2, values: Optional[list[float]] = None, metadata: Optional[dict] = None,
              alpha: Optional[tuple[str, list[int], bytes]] = None) -> Path:
    """A PEFT LoRA on the tiny Wan's ``blocks.0.attn1.to_q`` ([16, 16]) of ``rank``."""
    down = values if values is not None else [0.01] * (rank * 16)
    tensors = {f"transformer.{LORA_MODULE}.lora_A.weight": ("F32", [rank, 16], f32(down[: rank * 16])),
               f"transformer.{LORA_MODULE}.lora_B.weight": ("F32", [16, rank], f32([0.02] * (16 * rank)))}
    if alpha is not None:
        tensors[f"transformer.{LORA_MODULE}.alpha"] = alpha
    meta = None if metadata is None else {"lora_adapter_metadata": json.dumps(metadata)}
    path.write_bytes(safetensors_bytes(tensors, meta))
    return path


def job(weights: Path, family: str = "wan", lora: Optional[list] = None, preset: Optional[str] = None) -> dict:
    model: dict[str, Any] = {"weights": str(weights), "text_len": 6}
    if preset:
        model["preset"] = preset
    if lora is not None:
        model["lora"] = lora
    return {"name": "hard", "model": model, "parallel": {"ulysses": 1, "ring": 4},
            "workload": {"kind": "inference", "frames": 1 if family == "flux" else 9, "height": 48, "width": 48,
                         "steps": 2, "dtype": "float32"}}


def cli(*args: Any) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main([str(a) for a in args])
    return code, out.getvalue(), err.getvalue()


def plan(tmp: Path, doc: dict) -> tuple[int, str, str]:
    path = tmp / "job.json"
    path.write_text(json.dumps(doc, allow_nan=True))
    return cli("plan", "--cluster", "local", path, "--json")


def assert_one_line(code: int, err: str, what: Any = None) -> None:
    assert code == 2, (what, code, err)
    assert len(err.strip().splitlines()) == 1 and err.startswith("sporch: error: "), (what, err)
    assert "internal error" not in err and "Traceback" not in err, (what, err)


# -- item 9: config.json values ----------------------------------------------------------------------
@pytest.mark.parametrize("family,key,value,message", [
    ("wan", "num_layers", 0, "num_layers: 0 must be an integer from 1"),
    ("wan", "num_layers", -3, "num_layers: -3 must be an integer from 1"),
    ("wan", "ffn_dim", math.inf, "ffn_dim: inf must be an integer from 1 to 1048576, not a number"),
    ("wan", "num_attention_heads", 2.7, "num_attention_heads: 2.7 must be an integer from 1 to 1048576, not a number"),
    ("wan", "num_attention_heads", "2", "num_attention_heads: '2' must be an integer from 1 to 1048576, not a string"),
    ("wan", "num_layers", True, "num_layers: True must be an integer from 1 to 1048576, not a boolean"),
    ("wan", "in_channels", 0, "in_channels: 0 must be an integer from 1"),
    ("wan", "text_dim", 10**30, "text_dim: 1000000000000000000000000000000 must be an integer from 1"),
    ("wan", "attention_head_dim", 7, "attention_head_dim: 7 must be even"),
    ("wan", "attention_head_dim", 0, "attention_head_dim: 0 must be an integer from 2"),
    ("wan", "eps", math.nan, "eps: nan must be a finite number"),
    ("wan", "eps", -1, "eps: -1 must be above 0"),
    ("wan", "eps", "1e-6", "eps: '1e-6' must be a number, not a string"),
    ("wan", "patch_size", [1, 0, 2], "patch_size: [1, 0, 2] must be a list of 3 integers from 1"),
    ("wan", "patch_size", [1, 2], "patch_size: [1, 2] must be a list of 3 integers"),
    ("wan", "freq_dim", 1, "freq_dim: 1 must be an integer from 2"),
    ("wan", "cross_attn_norm", 1, "cross_attn_norm: 1 must be true or false"),
    ("wan", "qk_norm", 0, "qk_norm: 0 must be a string, not an integer"),
    ("wan", "rope_max_seq_len", -1, "rope_max_seq_len: -1 must be an integer from 1"),
    ("wan", "image_dim", 2.5, "image_dim: 2.5 must be an integer"),
    ("wan", "added_kv_proj_dim", 32, "added_kv_proj_dim: 32 with image_dim None"),
    ("wan", "window_size", [4, 4], "window_size: is not a WanTransformer3DModel config key sporch knows"),
    ("flux", "axes_dims_rope", [2, 2, 2], "axes_dims_rope: [2, 2, 2] must be even numbers summing to attention_head_dim 8"),
    ("flux", "axes_dims_rope", [1, 3, 4], "must be even numbers"),
    ("flux", "axes_dims_rope", "224", "axes_dims_rope: '224' must be a list of 3 integers"),
    ("flux", "in_channels", 10, "in_channels: 10 must be a multiple of 4"),
    ("flux", "in_channels", 0, "in_channels: 0 must be an integer from 4"),
    ("flux", "guidance_embeds", "yes", "guidance_embeds: 'yes' must be true or false"),
    ("flux", "num_single_layers", -1, "num_single_layers: -1 must be an integer from 0"),
    ("wan-original", "num_heads", 3, "num_heads: 3 must divide dim 16"),
    ("wan-original", "dim", 0, "dim: 0 must be an integer from 1"),
    ("wan-original", "eps", math.inf, "eps: inf must be a finite number"),
])
def test_a_bad_config_value_is_one_line_in_plan_and_inspect(tmp_path, family, key, value, message):
    folder = checkpoint(tmp_path / "ckpt", {**CONFIGS[family], key: value})
    code, _, err = plan(tmp_path, job(folder, "flux" if family == "flux" else "wan"))
    assert_one_line(code, err, key)
    assert message in err and "config.json" in err, err
    code, _, err = cli("inspect", folder, "--json")
    assert_one_line(code, err, key)
    assert message in err, err


def test_nan_eps_says_finite_even_with_a_preset(tmp_path):
    """With a preset the config is compared with it: a NaN eps is refused as not finite, not as a
    disagreement with the job."""
    folder = checkpoint(tmp_path / "ckpt", {**WAN, "eps": math.nan})
    code, _, err = plan(tmp_path, job(folder, preset="wan2.1-t2v-1.3b"))
    assert_one_line(code, err)
    assert "eps: nan must be a finite number" in err and "disagrees" not in err, err


def test_a_folder_of_an_unsupported_class_is_refused_even_with_a_preset(tmp_path):
    """A preset beside a folder whose config.json names a class sporch does not run (SANA) is refused
    in one line naming the class: the preset cannot make the folder a model of its own (the folder
    was planned as the preset before)."""
    folder = checkpoint(tmp_path / "ckpt", {"_class_name": "SanaTransformer2DModel", "num_attention_heads": 4,
                                             "attention_head_dim": 8, "num_layers": 2})
    code, _, err = plan(tmp_path, job(folder, preset="wan2.1-t2v-1.3b"))
    assert_one_line(code, err)
    assert "'SanaTransformer2DModel' is not supported" in err and "is not a wan2.1-t2v-1.3b checkpoint" in err, err


def test_the_vae_strides_are_checked_not_defaulted(tmp_path):
    folder = checkpoint(tmp_path / "ckpt", WAN)
    (folder / "vae").mkdir()
    (folder / "vae" / "config.json").write_text(json.dumps({"_class_name": "AutoencoderKLWan",
                                                            "scale_factor_temporal": 0, "scale_factor_spatial": 8}))
    code, _, err = plan(tmp_path, job(folder))
    assert_one_line(code, err)
    assert "scale_factor_temporal 0" in err, err


def test_a_good_config_still_plans(tmp_path):
    for family, config in CONFIGS.items():
        folder = checkpoint(tmp_path / family, config)
        code, out, err = plan(tmp_path, job(folder, "flux" if family == "flux" else "wan"))
        assert code == 0, (family, err)
        assert json.loads(out)["model"]["head_dim"] == 8


# -- item 10 and 6: LoRA files -----------------------------------------------------------------------
@pytest.mark.parametrize("kwargs,message", [
    (dict(rank=0), "a rank and widths of at least 1"),
    (dict(metadata={"transformer.lora_alpha": "abc"}), "lora_alpha 'abc' must be a number"),
    (dict(metadata={"transformer.lora_alpha": math.nan}), "lora_alpha nan must be finite"),
    (dict(metadata={"transformer.lora_alpha": math.inf}), "lora_alpha inf must be finite"),
    (dict(metadata={"transformer.lora_alpha": 0}), "lora_alpha 0 must be finite, greater than 0"),
    (dict(metadata={"transformer.alpha_pattern": [1, 2]}), "alpha_pattern [1, 2]"),
    (dict(metadata={"transformer.alpha_pattern": {"blocks.0.attn1.to_q": "x"}}), "alpha_pattern['blocks.0.attn1"),
    (dict(metadata={"transformer.use_rslora": "false"}), "use_rslora 'false'"),
    (dict(metadata={"transformer.use_dora": 1}), "use_dora 1"),
    (dict(metadata=[1, 2]), "lora_adapter_metadata is not a JSON object"),
    (dict(alpha=("F32", [], f32([math.nan]))), "must be finite"),
    (dict(alpha=("F32", [], f32([math.inf]))), "must be finite"),
    (dict(values=[math.nan] + [0.01] * 31), "holds 1 NaN or inf value(s) of 32"),
    (dict(values=[0.01] * 31 + [-math.inf]), "holds 1 NaN or inf value(s) of 32"),
])
def test_a_bad_lora_is_one_line_in_plan_and_inspect(tmp_path, kwargs, message):
    folder = checkpoint(tmp_path / "ckpt", WAN)
    lora = lora_file(tmp_path / "a.safetensors", **kwargs)
    code, _, err = plan(tmp_path, job(folder, lora=[{"path": str(lora)}]))
    assert_one_line(code, err, kwargs)
    assert message in err, err
    code, _, err = cli("inspect", lora, "--json")
    assert_one_line(code, err, kwargs)
    assert message in err, err


@pytest.mark.parametrize("scale", [1e308, -1e3, 101])
def test_a_lora_scale_out_of_range_is_refused(tmp_path, scale):
    folder = checkpoint(tmp_path / "ckpt", WAN)
    lora = lora_file(tmp_path / "a.safetensors")
    code, _, err = plan(tmp_path, job(folder, lora=[{"path": str(lora), "scale": scale}]))
    assert_one_line(code, err, scale)
    assert "model.lora[0].scale" in err and "out of range" in err, err


def test_a_good_lora_still_plans(tmp_path):
    folder = checkpoint(tmp_path / "ckpt", WAN)
    lora = lora_file(tmp_path / "a.safetensors", metadata={"transformer.lora_alpha": 4})
    code, out, err = plan(tmp_path, job(folder, lora=[{"path": str(lora), "scale": 0.5}]))
    assert code == 0, err
    assert json.loads(out)["model"]["lora"][0]["scale"] == 0.5
    code, out, err = cli("inspect", lora, "--json")
    assert code == 0 and json.loads(out)["alphas"] == [4.0], err


# -- the fuzz tests ----------------------------------------------------------------------------------
non_finite = st.sampled_from([math.nan, math.inf, -math.inf])
values = st.one_of(st.sampled_from([2, 4, 8, 16, 24]), st.integers(-3, 40), st.integers(2**20, 2**70), st.floats(allow_nan=True, allow_infinity=True),
                   non_finite, st.booleans(), st.none(), st.text(alphabet="0123abc-.", max_size=5),
                   st.lists(st.one_of(st.integers(-2, 20), st.floats(allow_nan=True), st.text(max_size=2)),
                            max_size=4),
                   st.dictionaries(st.sampled_from(["a", "b"]), st.integers(0, 3), max_size=2))


def _model_problem(model: dict) -> Optional[str]:
    """Why the planned model is nonsensical (None when the ranks can build it and its numbers are
    finite): every number finite, every size positive, and the shape rules a diffusers class
    needs (restated here so the test needs no torch)."""
    def numbers(v):
        if isinstance(v, bool):
            return []
        if isinstance(v, (int, float)):
            return [v]
        if isinstance(v, (list, tuple)):
            return [n for x in v for n in numbers(x)]
        if isinstance(v, dict):
            return [n for x in v.values() for n in numbers(x)]
        return []

    if not all(math.isfinite(n) for n in numbers(model)):
        return f"non-finite number in {model}"
    for key in ("depth", "hidden", "num_heads", "num_kv_heads", "head_dim", "ffn_dim", "in_channels", "text_dim"):
        if not (type(model.get(key)) is int and model[key] >= 1):
            return f"{key} {model.get(key)!r}"
    knobs = model.get("knobs") or {}
    hd, axes = model["head_dim"], knobs.get("rope_axes")
    if model["hidden"] != model["num_heads"] * hd or model["num_heads"] % model["num_kv_heads"] or hd % 2:
        return "heads, head_dim and hidden disagree"
    if len(model["patch"]) != 3 or min(model["patch"]) < 1:
        return f"patch {model['patch']}"
    if axes is not None and (len(axes) != 3 or sum(axes) != hd or any(a % 2 for a in axes)):
        return f"rope_axes {axes}"
    if knobs.get("out_channels", model["in_channels"]) > model["in_channels"]:
        return "out_channels > in_channels"
    if not 0 < knobs.get("eps", 1e-6) < 1 or knobs.get("freq_dim", 256) < 2:
        return f"eps or freq_dim in {knobs}"
    return None


@st.composite
def configs(draw):
    family = draw(st.sampled_from(sorted(CONFIGS)))
    config = dict(CONFIGS[family])
    for _ in range(draw(st.integers(1, 2))):
        key = draw(st.sampled_from(sorted(k for k in config if not k.startswith("_"))))
        if draw(st.integers(0, 7)) == 0:
            config.pop(key)
        else:
            config[key] = draw(values)
    return family, config


@settings(FUZZ, max_examples=20)  # a plan that succeeds costs ~0.3 s on a loaded 2-core machine
@given(case=configs())
def test_fuzzed_config_values_never_crash_nor_plan_nonsense(tmp_path_factory, case):
    family, config = case
    tmp = tmp_path_factory.mktemp("fz")
    folder = checkpoint(tmp / "ckpt", config)
    code, out, err = plan(tmp, job(folder, "flux" if family == "flux" else "wan"))
    assert code in (0, 2) and "internal error" not in err and "Traceback" not in err, (config, err)
    if code == 2:
        assert_one_line(code, err, config)
    else:
        problem = _model_problem(json.loads(out)["model"])
        assert problem is None, (config, problem)
    code, out, err = cli("inspect", folder, "--json")
    assert code in (0, 2) and "internal error" not in err and "Traceback" not in err, (config, err)
    if code == 2:
        assert_one_line(code, err, config)


alpha_values = st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.integers(-2, 2**70), st.booleans(),
                         st.text(max_size=3), st.lists(st.integers(0, 3), max_size=2), st.none())
DTYPES = {"F32": "<f", "F64": "<d", "I64": "<q", "U8": "<B"}


@st.composite
def loras(draw):
    """(file kwargs, job scale, whether the case is bad by construction)."""
    bad = False
    rank = draw(st.integers(0, 3))
    bad |= rank == 0
    kwargs: dict[str, Any] = {"rank": rank}
    if draw(st.booleans()):
        meta: Any = {}
        for key in draw(st.lists(st.sampled_from(["lora_alpha", "alpha_pattern", "use_rslora", "use_dora"]),
                                 max_size=3, unique=True)):
            if key == "alpha_pattern":
                value = draw(st.one_of(alpha_values, st.dictionaries(st.sampled_from([LORA_MODULE, "x"]),
                                                                     alpha_values, max_size=2)))
            elif key == "lora_alpha":
                value = draw(alpha_values)
            else:
                value = draw(st.one_of(st.booleans(), st.integers(0, 1), st.text(max_size=3), st.none()))
            meta[f"transformer.{key}"] = value
        if draw(st.integers(0, 9)) == 0:
            meta = draw(st.one_of(st.lists(st.integers(0, 3), max_size=2), st.text(max_size=3)))
        kwargs["metadata"] = meta
    if draw(st.integers(0, 3)) == 0:
        dtype = draw(st.sampled_from(sorted(DTYPES)))
        shape = draw(st.sampled_from([[], [1], [2]]))
        n = math.prod(shape)
        if dtype.startswith("F"):
            nums = draw(st.lists(st.floats(allow_nan=True, allow_infinity=True, width=32), min_size=n, max_size=n))
        else:
            nums = draw(st.lists(st.integers(0, 255 if dtype == "U8" else 2**40), min_size=n, max_size=n))
        kwargs["alpha"] = (dtype, shape, struct.pack(DTYPES[dtype][0] + DTYPES[dtype][1] * n, *nums))
    if rank and draw(st.integers(0, 3)) == 0:
        vals = [0.01] * (rank * 16)
        vals[draw(st.integers(0, rank * 16 - 1))] = draw(non_finite)
        kwargs["values"] = vals
        bad = True
    scale = draw(st.one_of(st.just(1.0), st.floats(-3, 3), st.floats(allow_nan=True, allow_infinity=True),
                           st.integers(-10**9, 10**9)))
    bad |= not math.isfinite(scale) or abs(scale) > 100
    return kwargs, scale, bad


def _alphas_finite(kwargs: dict) -> bool:
    meta = kwargs.get("metadata")
    if isinstance(meta, dict):
        nums = [v for k, v in meta.items() if k.endswith("lora_alpha")]
        pattern = meta.get("transformer.alpha_pattern")
        nums += list(pattern.values()) if isinstance(pattern, dict) else []
        if any(isinstance(v, float) and not math.isfinite(v) for v in nums):
            return False
    alpha = kwargs.get("alpha")
    return alpha is None or alpha[0] not in ("F32", "F64") or not count_nonfinite_bytes(alpha[2], alpha[0])


@FUZZ
@given(case=loras())
def test_fuzzed_lora_files_never_crash_nor_plan_nonsense(tmp_path_factory, case):
    kwargs, scale, bad = case
    bad = bad or not _alphas_finite(kwargs)
    tmp = tmp_path_factory.mktemp("fzl")
    folder = checkpoint(tmp / "ckpt", WAN)
    lora = lora_file(tmp / "a.safetensors", **kwargs)
    code, out, err = plan(tmp, job(folder, lora=[{"path": str(lora), "scale": scale}]))
    assert code in (0, 2) and "internal error" not in err and "Traceback" not in err, (kwargs, err)
    if code == 2:
        assert_one_line(code, err, kwargs)
    else:
        assert not bad, (kwargs, scale, "planned a LoRA that is bad by construction")
        entry = json.loads(out)["model"]["lora"][0]
        assert math.isfinite(entry["scale"]) and abs(entry["scale"]) <= 100
    code, out, err = cli("inspect", lora, "--json")
    assert code in (0, 2) and "internal error" not in err and "Traceback" not in err, (kwargs, err)
    if code == 2:
        assert_one_line(code, err, kwargs)
    else:
        report = json.loads(out)
        assert min(report["ranks"]) >= 1 and all(math.isfinite(f) and f > 0 for f in report["factors"]), report
