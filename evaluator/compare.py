"""Pure comparisons of engine outputs with the oracle's, each failure an Evidence naming where it happened.

Codebook 0 = main token (EOS + semantic), 1..9 = residual codes, compared over the codec's codebook only. NaN/Inf
always fails (E8). A token is inside a step's sampling support (sampling.filter_logits; main = first and RAS draws)
when its logit is at least the support's lowest minus the logit tolerance.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from reference_runtime.api import SamplingParams
from reference_runtime.config import Drama3Config
from reference_runtime.model.sampling import filter_logits
from targets.schema import ToleranceSpec

from .channel import describe
from .verdict import Evidence


@dataclass(frozen=True, slots=True)
class Logits:
    main: torch.Tensor  # (F, 1 + codebook_size)
    codes: torch.Tensor  # (F, num_codebooks - 1, head_size)


@dataclass(frozen=True, slots=True)
class LogitStats:
    max_abs_err: float
    top1: float
    top5: float
    eos_max_err: float


def per_codebook(config: Drama3Config, logits: Logits) -> list[torch.Tensor]:
    """[main (F, V0), code 1 (F, Vr), ..., code 9 (F, Vr)], code heads cut to the codec's codebook size."""
    valid = config.codec.residual_codebook_size
    return [logits.main] + [logits.codes[:, k, :valid] for k in range(logits.codes.shape[1])]


def forced_tokens(config: Drama3Config, frames: torch.Tensor) -> torch.Tensor:
    """(F, 10) indices into per_codebook's columns: main index (0 = EOS), then codes 1..9."""
    semantic = frames[:, 0] >= config.semantic_begin
    main = torch.where(semantic, frames[:, 0] - config.semantic_begin + 1, 0)
    return torch.cat((main[:, None], frames[:, 2:]), dim=1)


def invalid_frame(config: Drama3Config, frames: torch.Tensor) -> int | None:
    """Index of the first row that is not a well-formed frame (semantic main with code0 = main - semantic_begin,
    or EOS with zero codes; residual codes in range), else None."""
    main, begin = frames[:, 0], config.semantic_begin
    semantic = (main >= begin) & (main < begin + config.codebook_size)
    eos = (main == config.eos_token_id) & (frames[:, 1:] == 0).all(1)
    ok = torch.where(semantic, frames[:, 1] == main - begin, eos)
    ok &= ((frames[:, 2:] >= 0) & (frames[:, 2:] < config.codec.residual_codebook_size)).all(1)
    return None if ok.all() else int((~ok).nonzero()[0, 0])


def _support_floor(logits: torch.Tensor, temperature: float, top_p: float, top_k: int,
                   keep_crossing: bool) -> torch.Tensor:
    """(F, V) -> (F,) the lowest logit the sampler could still draw."""
    if temperature == 0:
        return logits.max(dim=-1).values
    kept = torch.isfinite(filter_logits(logits / temperature, top_k, top_p, keep_crossing))
    return logits.masked_fill(~kept, float("inf")).min(dim=-1).values


def outside_support(config: Drama3Config, logits: Logits, frames: torch.Tensor, sampling: SamplingParams,
                    tol: ToleranceSpec) -> torch.Tensor:
    """(F, 10) bool: the frame's token lies outside `logits`' sampling support at that step (EOS frames' codes,
    which are placeholders, never count)."""
    s = sampling
    books = per_codebook(config, logits)
    floors = [torch.minimum(_support_floor(books[0], s.temperature, s.top_p, s.top_k, True),
                            _support_floor(books[0], s.ras_temperature, s.ras_top_p, s.ras_top_k, True))]
    valid = books[1].shape[-1]
    code_k = min(s.code_top_k, valid) if s.code_top_k > 0 else valid
    floors += [_support_floor(b, s.code_temperature, s.code_top_p, code_k, False) for b in books[1:]]
    tokens = forced_tokens(config, frames)
    outside = torch.zeros(tokens.shape, dtype=torch.bool)
    for k, (book, floor) in enumerate(zip(books, floors)):
        token = tokens[:, k].clamp(0, book.shape[-1] - 1)
        value = book.gather(1, token[:, None])[:, 0]
        in_range = tokens[:, k] < book.shape[-1]
        outside[:, k] = ~in_range | (value < floor - (tol.logit_atol + tol.logit_rtol * floor.abs()))
    outside[frames[:, 0] == config.eos_token_id, 1:] = False
    return outside


def check_logits(config: Drama3Config, prompt: str, ref: Logits, cand: Logits, frames: torch.Tensor,
                 sampling: SamplingParams | None, tol: ToleranceSpec) -> tuple[LogitStats | None, list[Evidence]]:
    """Teacher-forced candidate logits vs the oracle's on the same forced `frames`; when the oracle drew them
    with `sampling`, each must also lie in the candidate's sampling support (None: random frames, no check)."""
    for name in ("main", "codes"):
        r, c = getattr(ref, name), getattr(cand, name)
        if c.dtype != torch.float32 or c.shape != r.shape:
            return None, [Evidence(check="teacher_forced", prompt=prompt, message=(
                f"{name} logits are {describe(c)}, expected float32 {tuple(r.shape)}"))]
    refs, cands = per_codebook(config, ref), per_codebook(config, cand)
    evidence = []
    for k, c in enumerate(cands):
        bad = ~torch.isfinite(c).all(dim=-1)
        if bad.any():
            f = int(bad.nonzero()[0, 0])
            evidence.append(Evidence(check="teacher_forced", prompt=prompt, frame=f, codebook=k,
                                     message="non-finite logits (NaN/Inf)"))
            return None, evidence
    excess, abs_err = _excess(refs, cands, tol)
    f, k = divmod(int(excess.argmax()), excess.shape[1])
    if excess[f, k] > 0:
        evidence.append(Evidence(check="teacher_forced", prompt=prompt, frame=f, codebook=k,
                                 value=float(abs_err[f, k]), limit=float(abs_err[f, k] - excess[f, k]),
                                 message="logits differ beyond logit_atol + logit_rtol*|ref| (worst step shown)"))
    eos_err = (cand.main[:, 0] - ref.main[:, 0]).abs()
    if eos_err.max() > tol.eos_logit_atol:
        f = int(eos_err.argmax())
        evidence.append(Evidence(check="teacher_forced", prompt=prompt, frame=f, codebook=0,
                                 value=float(eos_err[f]), limit=tol.eos_logit_atol, message="EOS logit differs"))
    top1, top5 = _agreement(refs, cands)
    for name, agree, need in (("top-1", top1, tol.top1_agreement), ("top-5", top5, tol.top5_agreement)):
        if agree.mean() < need:
            f, k = divmod(int(agree.argmin()), agree.shape[1])
            evidence.append(Evidence(check="teacher_forced", prompt=prompt, frame=f, codebook=k,
                                     value=float(agree.mean()), limit=need,
                                     message=f"{name} agreement too low (first disagreement shown)"))
    outside = outside_support(config, cand, frames, sampling, tol) if sampling else torch.zeros(1, dtype=torch.bool)
    if outside.any():
        f, k = (int(i) for i in outside.nonzero()[0])
        evidence.append(Evidence(check="teacher_forced", prompt=prompt, frame=f, codebook=k,
                                 message="the oracle's token is outside the candidate's sampling support"))
    stats = LogitStats(max_abs_err=float(abs_err.max()), top1=float(top1.mean()), top5=float(top5.mean()),
                       eos_max_err=float(eos_err.max()))
    return stats, evidence


def no_worse(config: Drama3Config, ref: Logits, cand: Logits, base: Logits, frames: torch.Tensor,
             sampling: SamplingParams | None, tol: ToleranceSpec) -> bool:
    """Whether the candidate's teacher-forced logits are nowhere further from the oracle's than the baseline's on
    the same prompt, frames and seed: at every (frame, codebook) where the candidate exceeds the logit tolerance
    the baseline exceeds it at least as much, an EOS error over its tolerance is at most the baseline's worst, a
    top-1 or top-5 agreement under its threshold at least the baseline's, and every oracle token lies in its
    sampling support (never inherited).
    Anchored to the oracle at each step, so errors inherited this way cannot grow along a lineage."""
    refs, cands, bases = (per_codebook(config, x) for x in (ref, cand, base))
    if not all(torch.isfinite(c).all() for c in cands):
        return False
    cand_excess, _ = _excess(refs, cands, tol)
    base_excess, _ = _excess(refs, bases, tol)
    over = cand_excess > 0
    if (cand_excess[over] > base_excess[over]).any():
        return False
    if (cand.main[:, 0] - ref.main[:, 0]).abs().max() > max(tol.eos_logit_atol,
                                                            float((base.main[:, 0] - ref.main[:, 0]).abs().max())):
        return False
    needs = (tol.top1_agreement, tol.top5_agreement)
    if any(c.mean() < min(need, b.mean()) for c, b, need in zip(_agreement(refs, cands), _agreement(refs, bases),
                                                                 needs)):
        return False
    return not (sampling and outside_support(config, cand, frames, sampling, tol).any())


def _excess(refs: list[torch.Tensor], cands: list[torch.Tensor],
            tol: ToleranceSpec) -> tuple[torch.Tensor, torch.Tensor]:
    """(F, 10) each: the worst |logit error| minus its allowance (> 0: out of tolerance), and the worst error."""
    excess = torch.stack([((c - r).abs() - (tol.logit_atol + tol.logit_rtol * r.abs())).max(dim=-1).values
                          for r, c in zip(refs, cands)], dim=1)
    abs_err = torch.stack([(c - r).abs().max(dim=-1).values for r, c in zip(refs, cands)], dim=1)
    return excess, abs_err


def _agreement(refs: list[torch.Tensor], cands: list[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """(F, 10) float each: top-1 agreement, mutual top-5 agreement."""
    top1 = torch.stack([r.argmax(-1) == c.argmax(-1) for r, c in zip(refs, cands)], dim=1).float()
    top5 = torch.stack([_mutual_top5(r, c) for r, c in zip(refs, cands)], dim=1).float()
    return top1, top5


def _mutual_top5(r: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
    k = min(5, r.shape[-1])
    r_in_c = (c.topk(k, dim=-1).indices == r.argmax(-1, keepdim=True)).any(-1)
    c_in_r = (r.topk(k, dim=-1).indices == c.argmax(-1, keepdim=True)).any(-1)
    return r_in_c & c_in_r


def check_waveform(check: str, prompt: str, ref: torch.Tensor, cand: torch.Tensor | None, limit: float,
                   frame_samples: int) -> list[Evidence]:
    """Candidate audio vs the oracle's (or vs its own other path), sample by sample."""
    if cand is None or cand.dtype != torch.float32 or cand.shape != ref.shape:
        return [Evidence(check=check, prompt=prompt,
                         message=f"audio is {describe(cand)}, expected float32 {tuple(ref.shape)}")]
    if not torch.isfinite(cand).all():
        f = int((~torch.isfinite(cand)).nonzero()[0, 0]) // frame_samples
        return [Evidence(check=check, prompt=prompt, frame=f, message="non-finite audio samples")]
    if cand.numel() == 0:
        return []
    err = (cand - ref).abs()
    worst = int(err.argmax())
    if err[worst] > limit:
        return [Evidence(check=check, prompt=prompt, frame=worst // frame_samples, value=float(err[worst]),
                         limit=limit, message="waveforms differ (worst sample's frame shown)")]
    return []
