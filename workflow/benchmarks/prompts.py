"""Prompt templates, by name, for evaluation and for training prompts alike. A model whose tokenizer has its own
chat template gets the messages through it."""

from __future__ import annotations

BOXED = "{question}\nPlease reason step by step, and put your final answer within \\boxed{{}}."

# The chat template of the SFT-then-RL seed (its Appendix E), used for every model family there.
SEED003_SYSTEM = (
    "Your task is to follow a systematic, thorough reasoning process before providing the final solution. This "
    "involves analyzing, summarizing, exploring, reassessing, and refining your thought process through multiple "
    "iterations. Structure your response into two sections: Thought and Solution. In the Thought section, present "
    "your reasoning using the format: \"<think>\\n {thoughts} </think>\\n\". Each thought should include detailed "
    "analysis, brainstorming, verification, and refinement of ideas. After \"</think>\\n,\" in the Solution "
    "section, provide the final, logical, and accurate answer, clearly derived from the exploration in the Thought "
    "section. If applicable, include the answer in \\boxed{} for closed-form results like multiple choices or "
    "mathematical solutions.")
SEED003_USER = "This is the problem: {question}"

TEMPLATES = ("boxed", "seed003", "raw")


def messages(question: str, template: str = "boxed") -> list[dict[str, str]]:
    """The chat messages of one question: boxed = one user turn asking for a \\boxed{} answer; seed003 = the
    seed-003 system prompt + "This is the problem: ..."; raw = the question alone as the user turn."""
    if template == "raw":
        return [{"role": "user", "content": question}]
    if template == "boxed":
        return [{"role": "user", "content": BOXED.format(question=question)}]
    if template == "seed003":
        return [{"role": "system", "content": SEED003_SYSTEM},
                {"role": "user", "content": SEED003_USER.format(question=question)}]
    raise ValueError(f"unknown prompt template {template!r}; known: {', '.join(TEMPLATES)}")


def render(question: str, template: str = "boxed", tokenizer=None) -> str:
    """The prompt text for one question.

    boxed    the question + "put your final answer within \\boxed{}" (through the tokenizer's chat template, if any)
    seed003  the seed-003 system prompt + "This is the problem: ..." (chat template if any, else plain
             "System: ... User: ... Assistant: <think>" as in the paper)
    raw      the question as it is (the synthetic arithmetic task)
    """
    if template == "raw":
        return question
    turns = messages(question, template)
    if tokenizer is not None and getattr(tokenizer, "chat_template", None):
        return tokenizer.apply_chat_template(turns, tokenize=False, add_generation_prompt=True)
    if template == "seed003":
        return f"System: {SEED003_SYSTEM} User: {SEED003_USER.format(question=question)} Assistant: <think>"
    return turns[0]["content"]
