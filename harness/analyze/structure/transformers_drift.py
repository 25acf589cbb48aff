"""transformers API drift: an AttributeError, TypeError or ImportError raised inside `transformers/`
(its innermost frames) or on a transformers object (a tokenizer, processor or config), whatever the
attribute: vLLM or the model code calls something a transformers release removed or changed."""

from harness.analyze.structure import rule

RULE = rule(
    "transformers-object-drift", "transformers-api-drift",
    "a transformers object lacks or refuses what vLLM or the model code calls (API drift)",
    "a transformers release within the range this vLLM was tested with",
    exception=r"^(?:\w+\.)*(?:AttributeError|TypeError|ImportError)\b",
    frames=r"/transformers/(?!.*modules/transformers_modules)",
    depth=2,
)
