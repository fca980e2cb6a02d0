"""python -m gpt2kit: the kit's first command, GPT-2's (gpt2/__main__.py)."""

import sys

from gpt2kit.gpt2.__main__ import main

if __name__ == "__main__":
    sys.exit(main())
