"""The site's pre-render step (`_quarto.yml`): the diagnostic notebooks, executed with their default
parameters into site-notebooks/, which the site renders as they are. Quarto, executing a notebook
itself, would write the outputs back into the committed notebooks/*.ipynb."""

from __future__ import annotations

import sys
from pathlib import Path

# Quarto runs this file with its Python from the project's root; the harness is that project.
sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from harness.publish.site import execute_notebooks  # noqa: E402  (after the path is set)

if __name__ == "__main__":
    execute_notebooks(Path("notebooks"), Path("site-notebooks"))
