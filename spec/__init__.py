"""statecert's contracts: typed protocols and dataclasses, each citing the requirement IDs of `chapters/`.

The normative text lives in the Markdown chapters shipped beside this package; the Python here is the same
contract in a form an implementation can type-check against.
"""

SPEC_VERSION = "0.1"
