"""Source files that transforms add to an engine package; read as text, never imported from here (they use
the engine package's relative imports)."""
