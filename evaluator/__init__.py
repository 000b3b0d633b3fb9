"""Judges a candidate engine against the reference: isolation, correctness cascade, benchmark.

    verdict = evaluate(candidate_dir, target, baseline_dir=..., work_dir=...)
"""
