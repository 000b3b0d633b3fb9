"""Teacher-forced gates from a measurement: the reference against itself under a precision perturbation (A/A).

    swarm tolerances TARGET [--prompts N] [--frames N] [--seed S] [--json out.json]

The reference runs teacher-forced twice on the same held-out prompts and forced frames: as the target runs it
(bf16 at full size, float32 for drama3-tiny), and with every floating weight but the block-FP8 experts and their
scales upcast one precision (float32, resp. float64), so the second run is the first one's math nearer to
exact. A candidate in the reference's own precision can land as far from exact as the reference does, on the
other side, so each recommended gate allows twice the measured distance: logit_atol such that twice each
step's error fits atol + logit_rtol * |ref|, the EOS and waveform limits at twice the worst error, and top-1 /
top-5 agreement at one minus twice the disagreement rate's 95% upper bound (Wilson, per prompt), so that a clean
small sample does not demand perfection (the cascade's one-step prefill check on a random prompt, 10 steps, still
fails on any disagreement under a bound above 0.9). The codec decodes the oracle's codes in both precisions too,
where its dtype follows the weights (on GPU; on CPU it runs in float32 either way).
"""
from __future__ import annotations

import math
import random
from dataclasses import asdict, dataclass

import torch
import yaml

from reference_runtime.api import Weights, frame_codes
from reference_runtime.checkpoint import model_weights
from reference_runtime.model import build_engine
from reference_runtime.prompt import build_rows
from reference_runtime.teacher_forcing import teacher_forced
from reference_runtime.tokenizer import load_tokenizer
from reference_runtime.weights import SCALE_SUFFIX, codec_dtype
from targets import Target

from .compare import Logits, check_logits, per_codebook
from .inputs import held_out_requests, prompt_label

UPCAST = {torch.bfloat16: torch.float32, torch.float16: torch.float32, torch.float32: torch.float64}


@dataclass(frozen=True, slots=True)
class Distances:
    """How far the perturbed reference lands from the reference, worst over the prompts."""

    precision: str  # e.g. "bfloat16 -> float32"
    prompts: int
    frames: int
    logit_max_abs: float
    logit_atol_for_twice: float  # max over the steps of 2 |err| - logit_rtol |ref|: the atol admitting twice each
    eos_max_abs: float
    top1_agreement: float
    top5_agreement: float
    steps_per_prompt: int  # teacher-forced (frame, codebook) steps behind each prompt's agreement
    waveform_max_abs: float
    codec_perturbed: bool  # False: the codec ran in the same dtype both times, so waveform_max_abs says nothing
    admitted_by_target: bool  # whether the target's current gates pass the upcast reference


@dataclass(frozen=True, slots=True)
class Gates:
    logit_atol: float
    eos_logit_atol: float
    top1_agreement: float
    top5_agreement: float
    waveform_max_abs: float | None  # None: not measured (the codec was not perturbed)


def upcast(weights: Weights) -> tuple[Weights, str]:
    """Every floating weight one precision up, except block-FP8 tensors and their fp32 scales (shared, not
    copied: the experts are the same numbers either way); the precision change it made, as text."""
    out, changes = {}, set()
    for name, w in weights.items():
        up = UPCAST.get(w.dtype) if not name.endswith(SCALE_SUFFIX) else None
        out[name] = w if up is None else w.to(up)
        if up is not None:
            changes.add(f"{str(w.dtype).removeprefix('torch.')} -> {str(up).removeprefix('torch.')}")
    return out, ", ".join(sorted(changes))


def measure(target: Target, prompts: int, frames: int, seed: int) -> Distances:
    device = torch.device("cpu" if target.hardware.device == "cpu" else f"cuda:{target.hardware.generation_gpu}")
    config, weights = model_weights(target.model.config, target.model.weights, target.model.weights_seed, device)
    perturbed, precision = upcast(weights)
    embed = "model.embed_tokens.weight"
    codec_perturbed = codec_dtype(device, weights[embed].dtype) != codec_dtype(device, perturbed[embed].dtype)
    engines = [build_engine(config, w, device) for w in (weights, perturbed)]
    tokenizer = load_tokenizer(config)
    rng = random.Random(seed)
    tol = target.tolerances
    logit_err = atol_twice = eos_err = wave_err = 0.0
    top1 = top5 = 1.0
    admitted = True
    for i, request in enumerate(held_out_requests(config, rng, prompts, frames)):
        generated = engines[0].generate(request)
        rows = build_rows(config, request, tokenizer)
        ref, alt = (Logits(*teacher_forced(e, rows, generated.frames, seed)) for e in engines)
        stats, evidence = check_logits(config, prompt_label(i, request), ref, alt, generated.frames,
                                       request.sampling, tol)
        if stats is None:
            raise RuntimeError(f"the upcast reference gave unusable logits: {evidence[0].message}")
        admitted &= not evidence
        logit_err, eos_err = max(logit_err, stats.max_abs_err), max(eos_err, stats.eos_max_err)
        top1, top5 = min(top1, stats.top1), min(top5, stats.top5)
        atol_twice = max(atol_twice, *(float((2 * (a - r).abs() - tol.logit_rtol * r.abs()).max())
                                         for r, a in zip(per_codebook(config, ref), per_codebook(config, alt))))
        codes = frame_codes(generated.frames)
        wave_err = max(wave_err, float((engines[1].decode_audio(codes) - engines[0].decode_audio(codes)).abs().max()))
    admitted &= not codec_perturbed or wave_err <= tol.waveform_max_abs
    return Distances(precision=precision, prompts=prompts, frames=frames, logit_max_abs=logit_err,
                     logit_atol_for_twice=atol_twice, eos_max_abs=eos_err, top1_agreement=top1, top5_agreement=top5,
                     steps_per_prompt=frames * config.num_codebooks, waveform_max_abs=wave_err,
                     codec_perturbed=codec_perturbed, admitted_by_target=admitted)


def recommend(d: Distances) -> Gates:
    """Twice each measured distance, rounded up to two significant digits; agreements at one minus twice the
    disagreement rate's upper bound. Without a perturbed codec, the waveform gates are left to the target."""
    n = d.steps_per_prompt
    return Gates(logit_atol=_up(d.logit_atol_for_twice), eos_logit_atol=_up(2 * d.eos_max_abs),
                 top1_agreement=_down(1 - 2 * wilson_upper(round((1 - d.top1_agreement) * n), n)),
                 top5_agreement=_down(1 - 2 * wilson_upper(round((1 - d.top5_agreement) * n), n)),
                 waveform_max_abs=_up(2 * d.waveform_max_abs) if d.codec_perturbed else None)


def wilson_upper(k: int, n: int, z: float = 1.96) -> float:
    """95% upper bound of a rate seen k times in n (Wilson score interval)."""
    p = k / n
    return (p + z * z / (2 * n) + z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))) / (1 + z * z / n)


def _up(x: float) -> float:
    """x rounded up to two significant digits; a floor of 1e-6 so an exact match still leaves fp32 rounding room."""
    x = max(x, 1e-6)
    scale = 10 ** (math.floor(math.log10(x)) - 1)
    return float(f"{math.ceil(x / scale - 1e-9) * scale:.2g}")  # the format drops float noise (0.013000000000000001)


def _down(x: float) -> float:
    return max(0.0, math.floor(x * 1000) / 1000)


def report(target: Target, d: Distances, gates: Gates) -> str:
    """A table of measured vs current vs recommended gates, and the YAML lines to paste."""
    tol = target.tolerances
    wave = f"{d.waveform_max_abs:.3g}" if d.codec_perturbed else "(same dtype)"
    rows = [("logit_atol", f"{d.logit_max_abs:.3g} (max |err|)", tol.logit_atol, gates.logit_atol),
            ("eos_logit_atol", f"{d.eos_max_abs:.3g}", tol.eos_logit_atol, gates.eos_logit_atol),
            ("top1_agreement", f"{d.top1_agreement:.3f}", tol.top1_agreement, gates.top1_agreement),
            ("top5_agreement", f"{d.top5_agreement:.3f}", tol.top5_agreement, gates.top5_agreement),
            ("waveform_max_abs", wave, tol.waveform_max_abs, gates.waveform_max_abs)]
    lines = [f"{target.name}: reference vs itself with weights upcast ({d.precision}), {d.prompts} held-out prompts "
             f"x {d.frames} teacher-forced frames; logit_rtol {tol.logit_rtol:g} kept",
             f"{'gate':<18} {'measured':>22} {'target now':>12} {'recommended':>12}"]
    lines += [f"{name:<18} {measured:>22} {now:>12.4g} {'-' if rec is None else format(rec, '.4g'):>12}"
              for name, measured, now, rec in rows]
    if not d.admitted_by_target:
        lines.append("the target's current gates REJECT the upcast reference: they are tighter than its own rounding")
    section = {name: value for name, value in asdict(gates).items() if value is not None}
    # safe_dump writes 1e-06 as 1.0e-06, which YAML reads back as a number
    lines.append("# paste over the target's tolerances (stream_max_abs compares an engine's stream with its own "
                 "generate, in one precision: not measured here)\n"
                 + yaml.safe_dump({"tolerances": section}, sort_keys=False))
    return "\n".join(lines)
