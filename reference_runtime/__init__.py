"""Drama 3 reference runtime: the correctness oracle and the baseline every candidate engine is judged against.

Imports only torch, the standard library, `tokenizers` and `safetensors` (never swarm/evaluator).
"""
