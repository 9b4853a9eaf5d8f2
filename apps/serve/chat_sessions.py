"""SmolCluster's conversation memory (`session_id`, `use_memory`), bounded: per session the last
MAX_TURNS turns, at most MAX_SESSIONS sessions (the least recently used is forgotten first), in
rank 0's memory (a restart forgets them). A /chat request of a session is answered with the
session's turns before its own as context (apps.serve.chat_template), and its turn and the answer
are kept for the next one."""
from __future__ import annotations

import threading
from collections import OrderedDict, deque

from apps.serve.chat_template import Turn
from apps.serve.http_errors import BadRequest

MAX_SESSIONS = 256
MAX_TURNS = 32
MAX_SESSION_ID = 128   # characters


def check_id(session_id: str, field: str = "session_id") -> str:
    if not 1 <= len(session_id) <= MAX_SESSION_ID:
        raise BadRequest(field, f"must be 1 to {MAX_SESSION_ID} characters, got {len(session_id)}")
    return session_id


class SessionStore:
    def __init__(self, max_sessions: int = MAX_SESSIONS, max_turns: int = MAX_TURNS):
        self.max_sessions, self.max_turns = max_sessions, max_turns
        self.sessions: OrderedDict[str, deque[Turn]] = OrderedDict()
        self.lock = threading.Lock()

    def history(self, session_id: str, limit: int | None = None) -> list[Turn]:
        with self.lock:
            turns = list(self.sessions.get(session_id, ()))
            if session_id in self.sessions:
                self.sessions.move_to_end(session_id)
        return turns[-limit:] if limit else turns

    def add(self, session_id: str, turns: list[Turn]) -> None:
        with self.lock:
            kept = self.sessions.setdefault(session_id, deque(maxlen=self.max_turns))
            kept.extend(turns)
            self.sessions.move_to_end(session_id)
            while len(self.sessions) > self.max_sessions:
                self.sessions.popitem(last=False)

    def clear(self, session_ids: list[str]) -> int:
        """Forget these sessions; returns the number of turns deleted."""
        with self.lock:
            return sum(len(self.sessions.pop(s, ())) for s in session_ids)

    def count(self) -> int:
        with self.lock:
            return len(self.sessions)
