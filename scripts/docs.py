#!/usr/bin/env python3
"""Write the generated docs (workflow/reference.py): docs/configuration.md, docs/sweep.schema.json, docs/engines.md.
`--check`: write nothing, exit 1 if either is stale."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from workflow import reference  # noqa: E402

if __name__ == "__main__":
    if "--check" in sys.argv[1:]:
        stale = reference.stale()
        for path in stale:
            print(f"stale: {path} (run python scripts/docs.py)", file=sys.stderr)
        sys.exit(1 if stale else 0)
    for path in reference.write():
        print(f"wrote {path}")
