"""The report's sections. Each computes plain data from the `Study` (a dataclass, a DataFrame, a list
of sentences) and has a separate `*_md` formatter that index.qmd's cells print; tests assert on the
data. One module per part of the page."""
