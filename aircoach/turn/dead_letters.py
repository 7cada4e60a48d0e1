"""Dead letters: a turn the chat store refused waits in a spool and is replayed into the store
by a later request that finds the store healthy.

The spool is S3 (`DEADLETTER_BUCKET` under `DEADLETTER_PREFIX`, shared by every instance) or,
without a bucket, one file per turn under `DATA_DIR/deadletter` (on Lambda/Vercel that is
`/tmp`: it survives only as long as the instance, so a bucket is the production choice).
Entries are named by turn id, so they replay oldest first, and replaying is idempotent: the
store keeps one turn per turn id, and an entry is deleted only once the store has the turn.
An entry that is not a turn (spooled by a version with another schema, or damaged) is moved
aside to the spool's quarantine, so it never holds a slot of the next replays; so is a turn
the store refuses twice while it takes other turns (a MongoDB document over 16 MB, a value
the store cannot encode), or that the spool cannot read, so it never blocks the turns behind
it. A store that refuses every turn is down: nothing is moved aside, the turns wait for it.

Blocking work (boto3, file I/O) runs in worker threads. Nothing runs in the background: the
replay happens inside a request, after that request's own turn was stored.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Protocol

from pydantic import ValidationError

from aircoach.errors import StoreUnavailable
from aircoach.turn.ports import ChatStore
from aircoach.turn.records import Turn

log = logging.getLogger(__name__)


class TurnSpool(Protocol):
    """Where refused turns wait. Keys sort in turn order (they are turn ids)."""

    kind: str

    async def put(self, turn: Turn) -> None: ...

    async def keys(self, limit: int) -> list[str]:
        """The oldest `limit` entries."""
        ...

    async def get(self, key: str) -> Turn | None:
        """The entry's turn; None when it is gone (another instance moved it since it was
        listed)."""
        ...

    async def delete(self, key: str) -> None: ...

    async def quarantine(self, key: str) -> None:
        """Move the entry out of the listing, where an operator can still read it."""
        ...

    async def find(self, turn_id: str) -> Turn | None:
        """The spooled turn of that id, or None when it is not spooled."""
        ...

    async def remove(self, turn_id: str) -> None:
        """Delete the entry of that turn; nothing when it is not spooled."""
        ...


# How long an entry must keep failing, while the store takes other turns, before it is moved
# to the quarantine: longer than a store's restart or failover, so that a good turn is never
# moved aside by a store that flickers while it comes back.
QUARANTINE_AFTER_S = 30.0


class _ReplayFailed(Exception):
    """A replay stopped at a failure of the spool or the store (its cause)."""


class _EntryFailed(Exception):
    """One entry did not move: the spool could not read it, or the store refused it
    (`in_store`); its cause says why."""

    def __init__(self, *, in_store: bool):
        super().__init__()
        self.in_store = in_store


class DeadLetters:
    """The spool and its replay. A replay is due when this process spooled a turn since the
    last one, or `recheck_s` after the last look (other instances may have spooled turns);
    each replay moves at most `batch` turns, so a long backlog drains over several requests
    instead of holding one response."""

    def __init__(
        self,
        spool: TurnSpool,
        *,
        recheck_s: float = 60.0,
        batch: int = 20,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.spool = spool
        self.recheck_s = recheck_s
        self.batch = batch
        self.clock = clock
        self.spooled = 0  # by this process
        self.replayed = 0
        self.quarantined = 0
        self.pending: int | None = None  # as of the last look; None before any
        # Class names only: health shows them, and an error's text may carry a URL or a path.
        self.last_error: str | None = None
        self.spool_error: str | None = None  # the spool's last operation failed
        self._dirty = False
        self._looked_at = float("-inf")
        self._replaying = False
        # Entries that failed every look since the time given (a batch at most): tried
        # last, and moved aside once they have failed for QUARANTINE_AFTER_S while the store
        # took other turns.
        self._failing: dict[str, float] = {}
        self._store_up_at = float("-inf")  # when the store last took a turn (this process)

    async def keep(self, turn: Turn) -> bool:
        """Spool a turn the store refused; False when the spool failed too (it is lost)."""
        try:
            await self.spool.put(turn)
        except Exception as exc:
            self._failed(exc, spool=True)
            log.error(
                "dead-letter spool (%s) refused turn %s: %s: %s",
                self.spool.kind,
                turn.turn_id,
                type(exc).__name__,
                exc,
            )
            return False
        self.spool_error = None
        self.spooled += 1
        self._dirty = True
        return True

    @property
    def due(self) -> bool:
        return self._dirty or self.clock() - self._looked_at >= self.recheck_s

    async def replay(self, chats: ChatStore, *, store_is_up: bool = False) -> int:
        """Move spooled turns into `chats` (oldest first); how many. Never raises: a store
        that fails again leaves the rest for a later request. `store_is_up`: the caller's
        own turn was just stored, so an entry the store refuses is its own fault (see
        `_move_batch`)."""
        if store_is_up:
            self._store_up_at = self.clock()
        if self._replaying or not self.due:
            return 0
        self._replaying = True
        before = self.replayed
        try:
            self._dirty, self._looked_at = False, self.clock()
            listed = await self._move_batch(chats, store_is_up=store_is_up)
            # A full batch: more may wait, the next request goes on.
            self._dirty = listed == self.batch
        except _ReplayFailed as failed:
            self._dirty = True
            self._stopped("replay", self.replayed - before, failed)
        finally:
            self._replaying = False
        moved = self.replayed - before
        if moved:
            log.info("dead letters replayed into the store: %d turns (%s)", moved, self.spool.kind)
        return moved

    async def drain(self, chats: ChatStore, *, limit: int = 1000) -> None:
        """Move every spooled turn into `chats` now, whoever spooled it and whenever: a delete
        of a conversation runs this before it removes the conversation's turns, so that none
        of them comes back from the spool afterwards. `StoreUnavailable` (the client retries;
        each attempt moves its share) when the spool or the store fails, or more than `limit`
        turns wait."""
        before = self.replayed
        for _ in range(-(-limit // self.batch)):  # `limit` turns at most, a batch at a time
            try:
                listed = await self._move_batch(chats)
            except _ReplayFailed as failed:
                self._stopped("drain", self.replayed - before, failed)
                raise StoreUnavailable() from None
            if listed < self.batch:
                break
        else:
            log.warning(
                "dead-letter drain: %d turns moved and more may wait (%s); the request is "
                "refused until they are in the store",
                self.replayed - before,
                self.spool.kind,
            )
            raise StoreUnavailable()
        self._dirty, self._looked_at = False, self.clock()
        if moved := self.replayed - before:
            log.info("dead letters drained into the store: %d turns (%s)", moved, self.spool.kind)

    async def conversation_turns(
        self, chats: ChatStore, user_id: str, conversation_id: str, *, limit: int = 100
    ) -> list[str]:
        """Before the user's conversation is deleted: the ids of its turns that stay in the
        spool, for the delete to `remove` after the rest of the conversation, so that none
        of them comes back afterwards. The spool is drained first (`drain`); when turns stay
        in it (the store refuses them), those of this conversation are the delete's, and the
        others wait for the store: they are not this delete's (a turn the store refuses,
        alone on a quiet instance, refused every delete of every conversation until a chat
        turn was stored there). A conversation whose turns the store refused all is there
        alone, and is deleted all the same. `StoreUnavailable` when the spool cannot be
        listed, an entry left cannot be read (it may be this conversation's), or `limit`
        turns or more wait (an outage: each would be read)."""
        try:
            await self.drain(chats, limit=limit)
            return []
        except StoreUnavailable:
            pass
        try:
            keys = await self.spool.keys(limit)
            left = [await self.spool.get(key) for key in keys]
        except Exception as exc:
            self._failed(exc, spool=True)
            raise StoreUnavailable() from exc
        if len(keys) >= limit:
            raise StoreUnavailable()
        return [
            turn.turn_id
            for turn in left
            if turn is not None
            and turn.userId == user_id
            and turn.conversation_id == conversation_id
        ]

    def _stopped(self, what: str, moved: int, failed: _ReplayFailed) -> None:
        cause = failed.__cause__
        log.warning(
            "dead-letter %s stopped after %d turns (%s): %s: %s",
            what,
            moved,
            self.spool.kind,
            type(cause).__name__,
            cause,
        )

    async def _move_batch(self, chats: ChatStore, *, store_is_up: bool = False) -> int:
        """Move the oldest `batch` spooled turns into `chats`, an entry that is not a turn or
        that the store keeps refusing while it takes other turns to the quarantine; how many
        were listed.

        An entry that fails (the store refuses it, or the spool cannot read it) is moved
        aside only once it has failed at every look for `QUARANTINE_AFTER_S` and the store
        has taken a turn since its first failure: the refusal is then the entry's own, not a
        store that flickers while it comes back (two failures a moment apart took a good turn
        out of the history and its conversation's claim stayed held). Until then it waits:
        it is tried again after the next turn the store takes in the look, and after the
        others at the next look, so a good turn behind it can show the store is up. Two
        entries failing with no turn taken between them stop the look: the store is taken as
        down. A look that leaves an entry behind ends in `_ReplayFailed` (caused by the last
        failure), so that a drain never reports an empty spool."""
        try:
            keys = await self.spool.keys(self.batch)
        except Exception as exc:
            self._failed(exc, spool=True)
            raise _ReplayFailed() from exc
        now = self.clock()
        if store_is_up:
            self._store_up_at = now
        failing = {key: self._failing[key] for key in keys if key in self._failing}
        still: dict[str, float] = {}  # bounded by the batch
        ordered = [k for k in keys if k not in failing] + [k for k in keys if k in failing]
        moved = set_aside = 0
        waiting: list[str] = []  # failed since the store last took a turn
        last: _EntryFailed | None = None

        async def failed(key: str, failure: _EntryFailed) -> bool:
            """Move `key` aside if its time is up (True); else remember it."""
            nonlocal set_aside, last
            first = failing.get(key, now)
            if now - first >= QUARANTINE_AFTER_S and self._store_up_at >= first:
                await self._set_aside(key, failure)
                set_aside += 1
                return True
            still[key], last = first, failure
            return False

        tried: set[str] = set()
        try:
            for key in ordered:
                tried.add(key)
                try:
                    moved_it = await self._move(key, chats)
                except _EntryFailed as failure:
                    if await failed(key, failure):
                        continue
                    waiting.append(key)
                    if len(waiting) == 2:
                        break
                    continue
                if moved_it is None:
                    set_aside += 1
                    continue
                moved += moved_it
                if moved_it:
                    self._store_up_at = self.clock()
                    for earlier in waiting:  # the store took a turn: try them again
                        del still[earlier]
                        try:
                            moved += await self._move(earlier, chats) or 0
                        except _EntryFailed as failure:
                            await failed(earlier, failure)
                    waiting = []
        except Exception as exc:  # the spool failed to delete or move aside an entry
            self._failed(exc, spool=True)
            raise _ReplayFailed() from exc
        # Those not reached this look keep their first failure.
        self._failing = {
            **{k: t for k, t in failing.items() if k not in keys[: len(keys)]},
            **still,
        }
        if still:
            assert last is not None
            cause = last.__cause__
            assert isinstance(cause, Exception)
            self._failed(cause, spool=not last.in_store)
            raise _ReplayFailed() from cause
        self.pending = len(keys) - moved - set_aside
        self.spool_error = None
        return len(keys)

    async def _move(self, key: str, chats: ChatStore) -> int | None:
        """Move one entry into `chats`: 1, or 0 when it is gone (another instance replayed
        it since the listing), None when it is not a turn (moved to the quarantine).
        `_EntryFailed` when the spool cannot read it or the store refuses it."""
        in_store = False
        try:
            turn = await self.spool.get(key)
            if turn is None:
                return 0
            in_store = True
            await chats.append_turn(turn)
        except ValidationError as exc:
            await self.spool.quarantine(key)
            self.quarantined += 1
            # The key only: the entry holds a user's question and answer.
            first = exc.errors(include_input=False, include_url=False)[0]
            log.warning(
                "dead letter %r is not a turn (%d errors, first %s at %r): moved to the "
                "spool's quarantine (%s)",
                key,
                exc.error_count(),
                first["type"],
                ".".join(map(str, first["loc"])),
                self.spool.kind,
            )
            return None
        except Exception as exc:
            raise _EntryFailed(in_store=in_store) from exc
        await self.spool.delete(key)
        self.replayed += 1
        return 1

    async def _set_aside(self, key: str, failed: _EntryFailed) -> None:
        """Move an entry that failed again while the store took turns to the quarantine."""
        cause = failed.__cause__
        await self.spool.quarantine(key)
        self.quarantined += 1
        self.last_error = type(cause).__name__
        # Class names only: an encoder's message may quote the turn's text.
        reason = type(cause).__name__
        if cause is not None and cause.__cause__ is not None:
            reason += f" from {type(cause.__cause__).__name__}"
        log.warning(
            "dead letter %r %s while it took other turns (%s): moved to the spool's "
            "quarantine (%s)",
            key,
            f"{'refused by the store' if failed.in_store else 'unreadable in the spool'} "
            f"for {QUARANTINE_AFTER_S:g} s or more",
            reason,
            self.spool.kind,
        )

    async def find(self, user_id: str, turn_id: str) -> Turn | None:
        """The user's turn of that id if it waits in the spool (its store write failed), else
        None; None too when the spool cannot be read (logged): the caller then answers as if
        it were not there."""
        try:
            turn = await self.spool.find(turn_id)
        except Exception as exc:
            # An entry that is not a turn is no spool outage: the replay moves it aside.
            self._failed(exc, spool=not isinstance(exc, ValidationError))
            log.warning(
                "dead-letter spool (%s) unreadable for turn %s: %s: %s",
                self.spool.kind,
                turn_id,
                type(exc).__name__,
                exc,
            )
            return None
        self.spool_error = None
        return turn if turn is not None and turn.userId == user_id else None

    async def newest(
        self, user_id: str, belongs: Callable[[Turn], bool], *, limit: int = 100
    ) -> Turn | None:
        """The user's newest spooled turn that `belongs` (among the oldest `limit` entries),
        or None; None too when the spool cannot be read (logged), as for `find`. An entry
        that is not a turn is skipped: the replay moves it aside."""
        try:
            keys = await self.spool.keys(limit)
            for key in reversed(keys):
                try:
                    turn = await self.spool.get(key)
                except ValidationError:
                    continue
                if turn is not None and turn.userId == user_id and belongs(turn):
                    return turn
        except Exception as exc:
            self._failed(exc, spool=True)
            log.warning(
                "dead-letter spool (%s) unreadable: %s: %s",
                self.spool.kind,
                type(exc).__name__,
                exc,
            )
            return None
        self.spool_error = None
        return None

    async def remove(self, turn_id: str) -> None:
        """Take a turn out of the spool (a regeneration replaces it, or its conversation is
        deleted); `StoreUnavailable` when the spool fails."""
        try:
            await self.spool.remove(turn_id)
        except Exception as exc:
            self._failed(exc, spool=True)
            raise StoreUnavailable() from exc
        self.spool_error = None
        log.info("dead letter of turn %s removed from the spool (%s)", turn_id, self.spool.kind)

    def health(self) -> dict[str, object]:
        """For `/api/health`: what this process knows, without touching the spool.
        `unavailable` while the spool's last operation here failed (a turn the store refuses
        now is lost), until one succeeds; `last_error` stays, the class of the last failure
        of the spool or of a replay."""
        return {
            "spool": self.spool.kind,
            "status": "unavailable" if self.spool_error else "ok",
            "spooled": self.spooled,
            "replayed": self.replayed,
            "quarantined": self.quarantined,
            "pending": self.pending,
            "last_error": self.last_error,
        }

    def _failed(self, exc: Exception, *, spool: bool) -> None:
        self.last_error = type(exc).__name__
        if spool:
            self.spool_error = self.last_error
