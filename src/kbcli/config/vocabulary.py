"""The names search options accept: modes and their aliases, fusions, rewrite modes.

A leaf module (it imports nothing), so that :mod:`kbcli.types` (search options) and
:mod:`kbcli.config.parse` (``rag.rewrite.mode``) check against the same names without importing
each other.
"""

MODES = ("keyword", "semantic", "hybrid")
MODE_ALIASES = {"vector": "semantic", "dense": "semantic", "sparse": "keyword"}
FUSIONS = ("weighted", "rrf")
REWRITE_MODES = ("none", "hyde", "expand", "both")
