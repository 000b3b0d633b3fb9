"""Prompt templates for the LLM agents (data files, rendered by `swarm.agents.prompt`)."""
