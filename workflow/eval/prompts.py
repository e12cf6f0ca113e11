"""Prompt templates, by name. A model whose tokenizer has its own chat template gets the question through it."""

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


def render(question: str, template: str = "boxed", tokenizer=None) -> str:
    """The prompt text for one question.

    boxed    the question + "put your final answer within \\boxed{}" (through the tokenizer's chat template, if any)
    seed003  the seed-003 system prompt + "This is the problem: ..." (chat template if any, else plain
             "System: ... User: ... Assistant: <think>" as in the paper)
    raw      the question as it is (the synthetic arithmetic task)
    """
    if template == "raw":
        return question
    if template == "boxed":
        messages = [{"role": "user", "content": BOXED.format(question=question)}]
    elif template == "seed003":
        messages = [{"role": "system", "content": SEED003_SYSTEM},
                    {"role": "user", "content": SEED003_USER.format(question=question)}]
    else:
        raise ValueError(f"unknown prompt template {template!r}; known: {', '.join(TEMPLATES)}")
    if tokenizer is not None and getattr(tokenizer, "chat_template", None):
        return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    if template == "seed003":
        return f"System: {SEED003_SYSTEM} User: {SEED003_USER.format(question=question)} Assistant: <think>"
    return messages[0]["content"]
