"""Answer extraction from model output."""

from __future__ import annotations

_MARK = "\\boxed{"


def extract_boxed(text: str) -> str | None:
    """Content of the LAST complete \\boxed{...}, nested braces handled; None if there is none.

    Candidates are tried from the end. An unclosed candidate never closes an earlier one either (the earlier one is
    at depth >= 2 all through it), so each earlier candidate only needs scanning up to the later one's start:
    total work is linear in the text length, even for adversarial inputs.
    """
    end = len(text)
    while True:
        start = text.rfind(_MARK, 0, end)
        if start < 0:
            return None
        depth = 1
        i = start + len(_MARK)
        begin = i
        while i < end:
            ch = text[i]
            if ch == "{":
                depth += 1
            elif ch == "}":
                depth -= 1
                if depth == 0:
                    return text[begin:i].strip()
            i += 1
        end = start  # unclosed: try an earlier \boxed{, scanning only up to this one
