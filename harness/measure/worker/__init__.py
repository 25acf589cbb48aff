"""Code that runs *inside* a leg's venv: standard library and vLLM only, never `harness` itself.

The files here are executed as scripts by the leg's Python (`python bench.py spec.json`), so a leg
needs nothing of the project's own environment.
"""
