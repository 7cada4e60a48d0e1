"""What a message leaves in memory, and which items a question brings back into the prompt."""

from __future__ import annotations

import pytest

from aircoach.memory.ports import MemoryItem
from aircoach.memory.recall import (
    MAX_TOPIC_CHARS,
    SECTION_TITLE,
    memory_section,
    read_items,
    relevant,
)


def read(message: str) -> list[tuple[str, str]]:
    found = read_items(message, turn_id="t1", conversation_id="c1", created_at="2026-01-01")
    assert all(i.turn_id == "t1" and i.conversation_id == "c1" for i in found)
    return [(i.kind, i.text) for i in found]


def items(*entries: tuple[str, str]) -> list[MemoryItem]:
    """Newest first, as the store gives them."""
    return [
        MemoryItem(
            id=f"{len(entries) - n:04d}",
            kind=kind,  # type: ignore[arg-type]
            text=text,
            turn_id="t",
            created_at="2026-01-01",
        )
        for n, (kind, text) in enumerate(entries)
    ]


def test_a_message_leaves_its_facts_and_its_topic():
    assert read("Studio per il VDS e faccio fatica con la meteo. Cos'è il QNH?") == [
        ("goal", "Studia per: VDS"),
        ("difficulty", "Fa fatica con: meteo"),
        ("topic", "Ha chiesto: Studio per il VDS e faccio fatica con la meteo. Cos'è il QNH?"),
    ]
    assert read("come si legge un metar?") == [("topic", "Ha chiesto: come si legge un metar?")]


def test_a_request_to_forget_and_a_message_without_content_leave_nothing():
    assert read("dimentica quello che ti ho detto") == []
    assert read("ok, e?") == []
    assert read("Ciao, grazie!") == []


JWT = "eyJhbGciOiJSUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiJhdXRoMHwxMjM0NTYifQ.c2lnbmF0dXJh"


@pytest.mark.parametrize(
    "message",
    [
        f"studio per il VDS, l'app mi dà errore con questo token: {JWT}",
        f"Authorization: Bearer {JWT} non funziona, perché?",
        "la mia chiave è sk-proj-4f9aQ2xZ7LmN0pR8sT3vW6yB1 come la uso?",
        "ho dimenticato la password dell'app, era Volo2024!",
    ],
)
def test_a_message_with_a_credential_leaves_nothing(message):
    """Memory is shown to the model in every later conversation and listed by the app: a
    token or password pasted into the chat must not be kept there."""
    assert read(message) == []


@pytest.mark.parametrize(
    "message",
    [
        "come si legge METAR LIRF 261150Z 27010KT 9999 FEW030 18/12 Q1015?",
        "cosa significa il codice transponder 7700?",
        "qual è la differenza tra QNH e QFE sulla carta ICAO 1:500000?",
    ],
)
def test_codes_of_flying_are_not_credentials(message):
    assert [kind for kind, _ in read(message)] == ["topic"]


def test_a_long_question_is_cut_on_its_topic_line():
    ((kind, text),) = read("spiegami " + "la portanza " * 100)
    assert kind == "topic"
    assert len(text) == len("Ha chiesto: ") + MAX_TOPIC_CHARS and text.endswith("…")


def test_relevant_items_share_a_term_with_the_question_and_facts_always_count():
    kept = items(
        ("topic", "Ha chiesto: come funziona il variometro?"),
        ("topic", "Ha chiesto: cos'è il QNH?"),
        ("goal", "Studia per: VDS"),
        ("topic", "Ha chiesto: quando si usa il QNH in avvicinamento?"),
    )
    chosen = [i.text for i in relevant(kept, "mi rispieghi il qnh?", max_items=5)]
    # Both QNH topics (the newer first), then the goal; the variometer is not relevant.
    assert chosen == [
        "Ha chiesto: cos'è il QNH?",
        "Ha chiesto: quando si usa il QNH in avvicinamento?",
        "Studia per: VDS",
    ]
    assert [i.text for i in relevant(kept, "mi rispieghi il qnh?", max_items=1)] == [
        "Ha chiesto: cos'è il QNH?"
    ]
    # The label is not a term: "chiesto" does not match every topic.
    assert [i.kind for i in relevant(kept, "ricordi quello che ho chiesto?", max_items=5)] == [
        "goal"
    ]


def test_topics_of_the_turns_the_history_shows_are_left_out():
    kept = items(
        ("topic", "Ha chiesto: il QNH in crociera"),
        ("topic", "Ha chiesto: il QNH in decollo"),
        ("goal", "Studia per: VDS"),
        ("topic", "Ha chiesto: il QNH in atterraggio"),
    )
    for n, item in enumerate(kept):
        item.turn_id = f"t{n}"
    # Only the turns shown, newest or not; a fact of a shown turn stays.
    chosen = relevant(kept, "qnh", max_items=5, shown_turns={"t1", "t2"})
    assert [i.text for i in chosen] == [
        "Ha chiesto: il QNH in crociera",
        "Ha chiesto: il QNH in atterraggio",
        "Studia per: VDS",
    ]


def test_the_section_is_bounded_in_characters_with_whole_lines():
    kept = items(*((("topic", f"Ha chiesto: domanda numero {n} sul QNH")) for n in range(20)))
    section = memory_section(kept, max_chars=300)
    assert section.startswith(SECTION_TITLE)
    assert len(section) <= 300
    lines = section.splitlines()
    assert lines[2] == "- Ha chiesto: domanda numero 0 sul QNH"
    assert all(line.endswith("sul QNH") for line in lines[2:])
    assert memory_section([], max_chars=300) == ""
    assert memory_section(kept, max_chars=50) == ""  # not even one line fits
