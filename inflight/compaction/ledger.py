"""The ledger: a verbatim list of what dropped messages did, extended at each compaction and never re-summarized.

LLM summaries are weakest at exact details: paths, commands and error lines get paraphrased or
lost, and a summary of a summary loses more. The ledger keeps them verbatim and deterministically:
each compaction adds the facts of the span it drops (`facts.facts_of`) to the previous ledger. It is
the only memory when no summarizer is available, and sits below the LLM summary when one is.

When it outgrows its room, the oldest entries go first, outcomes before commands.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import field

from inflight.compaction.facts import Facts
from inflight.frozen import frozen

LEDGER_HEADING = "## Ledger (kept verbatim by inflight from the dropped messages)"
MAX_ENTRIES = 400  # per kind: more than any rendering shows, but keeps the record's size bounded
CUT_MARK = " [... cut]"  # the end of a ledger too long for its room even at one entry of each kind
SHORT_COMMANDS = (40, 28)  # the widths every command is shortened to, in turn, before the oldest are left out


@frozen
class Ledger:
    commands: tuple[str, ...] = ()
    outcomes: dict[str, str] = field(default_factory=dict)
    files: dict[str, str] = field(default_factory=dict)
    errors: tuple[str, ...] = ()
    identifiers: tuple[str, ...] = ()
    dropped_messages: int = 0

    def add(self, facts: Facts, *, messages: int) -> Ledger:
        """Return this ledger with a newer span's facts appended; a fact seen again moves to the end."""
        commands = _newest_last(self.commands, facts.commands)
        outcomes = {**self.outcomes, **facts.outcomes}
        # Older files first, new ones after (render keeps the newest); each file keeps the first command naming it.
        files = {**self.files, **{path: cmd for path, cmd in facts.files.items() if path not in self.files}}
        return Ledger(
            commands=commands,
            outcomes={command: outcomes[command] for command in commands if command in outcomes},
            files=dict(list(files.items())[-MAX_ENTRIES:]),
            errors=_newest_last(self.errors, facts.errors),
            identifiers=_newest_last(self.identifiers, facts.identifiers),
            dropped_messages=self.dropped_messages + messages,
        )

    def without(self, dropped: Callable[[str], bool]) -> Ledger:
        """This ledger without the files, errors, outcomes and names for which `dropped` is true; commands stay."""
        return Ledger(
            commands=self.commands,
            outcomes={command: said for command, said in self.outcomes.items() if not dropped(said)},
            files={path: command for path, command in self.files.items() if not dropped(path)},
            errors=tuple(error for error in self.errors if not dropped(error)),
            identifiers=tuple(name for name in self.identifiers if not dropped(name)),
            dropped_messages=self.dropped_messages,
        )

    def render(self, max_chars: int) -> str:
        """Render the ledger within `max_chars`: all of it when it fits; else every command still named, shortened
        and without outcomes (so no call vanishes without a trace), with the newest entries of the other kinds; else
        the newest entries of each kind, as many of each as fit; when even one of each is too long, that cut at the
        end with a marker."""
        for keep in (None, 60, 30, 15, 8, 4, 2, 1):
            text = self._text(keep, outcomes=keep is None or keep >= 15)
            if len(text) <= max_chars:
                return text
            if keep is None:
                for width in SHORT_COMMANDS:
                    named = self._text(15, outcomes=False, every_command=width)
                    if len(named) <= max_chars:
                        return named
        return text[: max(max_chars - len(CUT_MARK), 0)] + CUT_MARK

    def _text(self, keep: int | None, *, outcomes: bool, every_command: int = 0) -> str:
        def newest(items: tuple[str, ...] | list[str]) -> list[str]:
            return list(items) if keep is None else list(items)[-keep:]

        noun = "message" if self.dropped_messages == 1 else "messages"
        lines = [LEDGER_HEADING, f"({self.dropped_messages} {noun} dropped in all)"]
        if self.files:
            paths = newest(list(self.files))
            lines.append("Files: " + "; ".join(f"{path} (`{_short(self.files[path])}`)" for path in paths))
        if self.commands and every_command:
            lines.append(
                "Commands run, oldest first (shortened): "
                + "; ".join(f"`{_elided(command, every_command)}`" for command in self.commands)
            )
        elif self.commands:
            lines.append("Commands run, oldest first:")
            for command in newest(self.commands):
                outcome = self.outcomes.get(command) if outcomes else None
                lines.append(f"- `{command}`" + (f" -> {outcome}" if outcome else ""))
        if self.errors:
            lines.append("Errors seen:")
            lines += [f"- {error}" for error in newest(self.errors)]
        if self.identifiers:
            lines.append("Names used: " + ", ".join(newest(self.identifiers)))
        return "\n".join(lines)


def _newest_last(old: tuple[str, ...], new: tuple[str, ...]) -> tuple[str, ...]:
    renewed = set(new)
    return (tuple(item for item in old if item not in renewed) + new)[-MAX_ENTRIES:]


def _elided(command: str, limit: int) -> str:
    """A command within `limit` characters, its middle left out: commands run one after another often share their
    beginning and differ at the end."""
    command = " ".join(command.split())
    if len(command) <= limit:
        return command
    head = (limit - 3) // 2
    return command[:head] + "..." + command[len(command) - (limit - 3 - head) :]


def _short(command: str, limit: int = 60) -> str:
    command = " ".join(command.split())
    return command if len(command) <= limit else command[: limit - 3] + "..."
