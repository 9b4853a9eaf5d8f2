"""Chat messages as plain text for the char GPT, which knows no special tokens: each message is a
speech in tiny Shakespeare's own layout, the role in capitals, a colon, a new line, the content and a
blank line; the prompt ends with the assistant's heading, which the model continues:

    SYSTEM:\\nBe brief.\\n\\nUSER:\\nWho art thou?\\n\\nASSISTANT:\\n

(Every character of it is in tiny Shakespeare's vocabulary.) Content is a string or OpenAI's list
of text parts."""

from __future__ import annotations

from typing import Literal, Optional, Union

from pydantic import BaseModel, ConfigDict, StrictStr

from apps.serve.http_errors import BadRequest

ROLES = ("system", "developer", "user", "assistant", "tool")
GENERATION_PROMPT = "ASSISTANT:\n"


class TextPart(BaseModel):
    model_config = ConfigDict(extra="ignore")
    type: Literal["text"]
    text: StrictStr


class Message(BaseModel):
    model_config = ConfigDict(extra="ignore")
    role: StrictStr
    content: Union[StrictStr, list[TextPart], None] = None


Turn = tuple[str, str]  # (role, content)


def turns(messages: list[Message], field: str = "messages") -> list[Turn]:
    """Checked (role, text) pairs: BadRequest naming the message that is wrong."""
    if not messages:
        raise BadRequest(field, "must hold at least one message")
    out = []
    for i, m in enumerate(messages):
        if m.role not in ROLES:
            raise BadRequest(f"{field}.{i}.role", f"must be one of {', '.join(ROLES)}, got {m.role!r}")
        content = m.content if isinstance(m.content, str) else "".join(p.text for p in m.content or [])
        out.append((m.role, content))
    return out


def render(conversation: list[Turn]) -> str:
    return "".join(f"{role.upper()}:\n{content}\n\n" for role, content in conversation) + GENERATION_PROMPT


def last_user(conversation: list[Turn]) -> Optional[str]:
    return next((c for r, c in reversed(conversation) if r == "user"), None)
