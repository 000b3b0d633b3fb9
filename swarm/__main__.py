"""`python -m swarm ...` is the `swarm` command."""
from .cli import app

app(prog_name="swarm")
