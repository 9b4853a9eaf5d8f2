"""SmolCluster's conversation memory (`session_id`, `use_memory`), bounded: per session the last
MAX_TURNS turns, at most MAX_SESSIONS sessions (the least recently used is forgotten first), in
rank 0's memory (a restart forgets them). A session belongs to the caller that made it: its turns are
kept under (owner, session_id), the owner being a random token the server gives the caller in a
cookie (OWNER_COOKIE) the first time it uses a session, so a caller who knows or guesses another's
session_id still reads, extends and clears only its own sessions. A /chat request of a session is answered with the
session's turns before its own as context (apps.serve.chat_template), and its turn and the answer
are kept for the next one."""

from __future__ import annotations

import secrets
import threading
from collections import OrderedDict, deque

from apps.serve.chat_template import Turn
from apps.serve.http_errors import BadRequest

MAX_SESSIONS = 256
MAX_TURNS = 32
MAX_SESSION_ID = 128  # characters
OWNER_COOKIE = "pycomm_serve_owner"
OWNER_COOKIE_MAX_AGE_S = 30 * 24 * 3600


def new_owner() -> str:
    return secrets.token_urlsafe(32)


def check_id(session_id: str, field: str = "session_id") -> str:
    if not 1 <= len(session_id) <= MAX_SESSION_ID:
        raise BadRequest(field, f"must be 1 to {MAX_SESSION_ID} characters, got {len(session_id)}")
    return session_id


class SessionStore:
    def __init__(self, max_sessions: int = MAX_SESSIONS, max_turns: int = MAX_TURNS):
        self.max_sessions, self.max_turns = max_sessions, max_turns
        self.sessions: OrderedDict[tuple[str, str], deque[Turn]] = OrderedDict()  # (owner, session_id)
        self.lock = threading.Lock()

    def history(self, owner: str | None, session_id: str, limit: int | None = None) -> list[Turn]:
        """The session's turns; none for a caller without an owner token or with another's."""
        key = (owner or "", session_id)
        with self.lock:
            turns = list(self.sessions.get(key, ())) if owner else []
            if turns:
                self.sessions.move_to_end(key)
        return turns[-limit:] if limit else turns

    def add(self, owner: str, session_id: str, turns: list[Turn]) -> None:
        key = (owner, session_id)
        with self.lock:
            kept = self.sessions.setdefault(key, deque(maxlen=self.max_turns))
            kept.extend(turns)
            self.sessions.move_to_end(key)
            while len(self.sessions) > self.max_sessions:
                self.sessions.popitem(last=False)

    def clear(self, owner: str | None, session_ids: list[str]) -> int:
        """Forget these sessions of this owner; returns the number of turns deleted."""
        if not owner:
            return 0
        with self.lock:
            return sum(len(self.sessions.pop((owner, s), ())) for s in session_ids)

    def count(self) -> int:
        with self.lock:
            return len(self.sessions)
