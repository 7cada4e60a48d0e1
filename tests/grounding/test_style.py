"""`stile` (breve | dettagliato) and the points a conversation already covered: in the
prompt, and honoured by the offline model."""

from __future__ import annotations

from langchain_core.messages import HumanMessage, SystemMessage

from aircoach.grounding.context import ThreadView, TurnGrounding
from aircoach.grounding.style import (
    COVERED_HEADING,
    STYLE_HEADING,
    covered_points,
    resolved_style,
    shaped,
)
from tests.helpers import app_with, asgi_client, chat
from tests.scripted_model import Script, ScriptedModels, text

QNH = "Come si regola l'altimetro con il QNH?"


def _answer(events: list[dict]) -> str:
    return "".join(e["content"] for e in events if e["type"] == "agent_message")


def test_the_style_comes_from_the_request_then_the_profile():
    profile = "## Profilo\n- Nome: Anna\n- stile: dettagliato\n"
    assert resolved_style("breve", profile) == "breve"
    assert resolved_style(None, profile) == "dettagliato"
    assert resolved_style(None, profile.replace("dettagliato", "breve")) == "breve"
    assert resolved_style(None, "## Profilo\n- Nome: Anna") is None


def test_covered_points_are_the_first_sentence_of_each_paragraph_or_item():
    answers = [
        "Il QNH è la pressione ridotta al livello del mare. Si imposta prima del decollo.\n\n"
        "- La quota di transizione in Italia è 6.000 ft. Sopra si usa 1013.\n- Ok.",
        "Lo stallo dipende dall'angolo d'attacco critico, non dalla velocità.",
    ]
    assert covered_points(answers) == [
        "Il QNH è la pressione ridotta al livello del mare.",
        "La quota di transizione in Italia è 6.000 ft.",
        "Lo stallo dipende dall'angolo d'attacco critico, non dalla velocità.",
    ]
    many = [f"Il punto numero {n} della lezione di oggi." for n in range(20)]
    assert covered_points(many) == many[-8:]


def test_a_followup_prompt_lists_what_was_covered_and_the_style():
    thread = ThreadView(
        questions=["Quali sono le classi di spazio aereo e i minimi VFR?"],
        answers=["Le classi vanno dalla A alla G. In classe D servono 5 km."],
    )
    grounding = TurnGrounding(
        docs={}, thread=thread, question="e in classe C?", base_prompt="PROMPT", style="breve"
    )
    assert grounding.followup and grounding.shaped
    prompt = grounding.prompt
    assert prompt.index("PROMPT") < prompt.index(STYLE_HEADING) < prompt.index(COVERED_HEADING)
    assert "- Le classi vanno dalla A alla G." in prompt and "non ripeterli" in prompt
    plain = TurnGrounding(docs={}, thread=ThreadView(), question=QNH, base_prompt="PROMPT")
    assert not plain.shaped and plain.prompt == "PROMPT"


def test_shaped_drops_what_was_covered_and_cuts_a_brief_answer():
    answer = (
        "Dal manuale: il QNH è la pressione ridotta al livello del mare. Si imposta prima del "
        "decollo. La quota di transizione è 6.000 ft. (Fonte: § 3.2 (Meteorologia).)"
    )
    brief = [
        SystemMessage("PROMPT\n\n## Stile della risposta\nStile: breve. Rispondi..."),
        HumanMessage("?"),
    ]
    assert shaped(answer, brief) == (
        "Dal manuale: il QNH è la pressione ridotta al livello del mare. Si imposta prima del "
        "decollo. (Fonte: § 3.2 (Meteorologia).)"
    )
    covered = [
        SystemMessage(
            f"PROMPT\n\n{COVERED_HEADING}\nHai già spiegato...\n"
            "- Il QNH è la pressione ridotta al livello del mare.\n"
        )
    ]
    assert shaped(answer, covered) == (
        "Si imposta prima del decollo. La quota di transizione è 6.000 ft. "
        "(Fonte: § 3.2 (Meteorologia).)"
    )
    assert shaped(answer, [SystemMessage("PROMPT")]) == answer


async def test_the_offline_model_honours_the_style(client, auth):
    detailed = _answer(await chat(client, auth(), QNH, stile="dettagliato", chat_history=False))
    brief = _answer(await chat(client, auth(), QNH, stile="breve", chat_history=False))
    assert brief.startswith("[modello offline] Dal manuale del corso: ")
    assert "(Fonte: § 3.2" in brief and "(Fonte: § 3.2" in detailed
    assert len(brief) < len(detailed)


async def test_the_request_style_reaches_the_model_and_a_bad_one_is_refused(settings, auth):
    script = Script([text("Ok.")])
    app = app_with(settings, models=ScriptedModels(script))
    async with asgi_client(app) as client:
        await chat(client, auth(), "Cos'è il QNH?", stile="breve")
        wrong = await client.post(
            "/api/stream_query", json={"query": "x", "stile": "lungo"}, headers=auth()
        )
    system = script.calls[0][0]
    assert isinstance(system, SystemMessage) and "Stile: breve." in system.text
    assert wrong.status_code == 422


async def test_a_followup_asks_not_to_repeat_what_was_covered(settings, auth):
    first = "Le classi di spazio aereo vanno dalla A alla G. In classe D servono 5 km."
    script = Script([text(first), text("In classe C: 5 km.")])
    app = app_with(settings, models=ScriptedModels(script))
    async with asgi_client(app) as client:
        await chat(client, auth(), "Quali sono le classi di spazio aereo e i minimi VFR?")
        await chat(client, auth(), "e in classe C?")
    second = script.calls[1][0].text
    assert COVERED_HEADING in second
    assert "- Le classi di spazio aereo vanno dalla A alla G." in second
