"""The study page's exam, review and conversations (issue 38 phase 2) in a real Chromium,
against a real server on loopback (the dev issuer; the offline or a scripted model)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx
import pytest
from playwright.sync_api import expect

from aircoach.knowledge.library import course_bank
from tests.browser.conftest import SCREEN_SIZES, SCREENS, Session
from tests.browser.test_playground import _axe, _background, _key
from tests.helpers import app_with, served
from tests.scripted_model import Script, ScriptedModels, text

pytestmark = [pytest.mark.browser, pytest.mark.integration]

EXAM_QUESTIONS = 5


@contextmanager
def _signed_in_for_exams(settings, session_for, name: str, **size: Any) -> Iterator[Session]:
    """A tab signed in as `name` on a server whose mock exams have `EXAM_QUESTIONS`."""
    exam_settings = settings.model_copy(update={"exam_questions": EXAM_QUESTIONS})
    with served(app_with(exam_settings)) as origin:
        s = session_for(origin, **size)
        s.open()
        s.dev_sign_in(name)
        yield s


def _screens_without_violations(s: Session, name: str) -> dict[str, Any]:
    """Screenshots of the screen at 390x844 and 1280x800 (`SCREENS/<name>-WxH.png`), and
    axe's serious violations at each size (empty when clean)."""
    SCREENS.mkdir(parents=True, exist_ok=True)
    before = s.page.viewport_size
    found = {}
    for width, height in SCREEN_SIZES:
        s.page.set_viewport_size({"width": width, "height": height})
        s.page.screenshot(path=str(SCREENS / f"{name}-{width}x{height}.png"))
        violations = _axe(s.page)
        if violations:
            found[f"{name}-{width}"] = violations
        wide = s.page.evaluate("() => document.documentElement.scrollWidth")
        if wide > width:
            found[f"{name}-{width}-scroll"] = wide
    s.page.set_viewport_size(before)
    return found


def _question(capitolo: int, numero: int) -> dict[str, Any]:
    questions, _ = course_bank()
    return next(q for q in questions if (q["capitolo"], q["numero"]) == (capitolo, numero))


def test_a_mock_exam_is_taken_with_a_countdown_submitted_and_listed(settings, session_for, token):
    with _signed_in_for_exams(settings, session_for, "esaminando") as s:
        page = s.page
        submitted: list[Any] = []
        page.on(
            "request",
            lambda r: r.url.endswith("/submit") and submitted.append(r.post_data_json),
        )
        page.locator("#welcome").get_by_role("button", name="Simulazione d'esame").click()
        expect(page.locator("#exam-view")).to_be_visible()
        expect(page.locator("#chat-view")).to_be_hidden()
        expect(page.locator("#nav-exam")).to_have_attribute("aria-current", "page")
        expect(page.locator("#exam-list")).to_contain_text("Nessuna simulazione finora.")
        problems = _screens_without_violations(s, "10-exam-start")

        page.click("#exam-new")
        questions = page.locator("#exam-questions fieldset")
        expect(questions).to_have_count(EXAM_QUESTIONS)
        timer = page.locator("#exam-timer")
        # EXAM_DURATION_S is 45 minutes: the count starts there (a slow machine may lag a little).
        expect(timer).to_have_text(re.compile(r"^(4[0-4]:[0-5]\d|45:00)$"))
        shown = timer.text_content()
        expect(timer).not_to_have_text(shown)  # it counts down
        expect(page.locator("#exam-answered")).to_contain_text(f"0 di {EXAM_QUESTIONS}")

        # The first question right, the others wrong but the last, left unanswered.
        keys = []
        for index in range(EXAM_QUESTIONS - 1):
            fieldset = questions.nth(index)
            capitolo, numero = map(int, fieldset.get_attribute("data-question").split("-"))
            right = _key(capitolo, numero)
            letter = (
                right
                if index == 0
                else next(x for x in _question(capitolo, numero)["risposte"] if x != right)
            )
            keys.append((capitolo, numero, letter))
            fieldset.locator(f'input[data-letter="{letter}"]').check()
        expect(page.locator("#exam-answered")).to_contain_text(
            f"{EXAM_QUESTIONS - 1} di {EXAM_QUESTIONS}"
        )
        problems |= _screens_without_violations(s, "11-exam-questions")

        page.click("#exam-submit")
        verdict = page.locator(".exam-verdict")
        expect(verdict).to_have_attribute("data-superato", "false")
        expect(verdict).to_contain_text("non superata")
        expect(verdict).to_be_focused()
        expect(page.locator(".exam-score")).to_contain_text(
            f"Punteggio: 1 su {EXAM_QUESTIONS} (20 %)"
        )
        expect(page.locator(".exam-score")).to_contain_text("soglia per superarla 75 %")
        assert submitted == [
            {"risposte": [{"capitolo": c, "numero": n, "risposta": x} for c, n, x in keys]}
        ]
        exams = httpx.get(
            f"{s.origin}/api/exams", headers={"Authorization": f"Bearer {token('dev|esaminando')}"}
        ).json()["items"]
        assert [(e["punteggio"], e["superato"]) for e in exams] == [(1, False)]
        exam_id = exams[0]["id"]
        result = httpx.get(
            f"{s.origin}/api/exams/{exam_id}",
            headers={"Authorization": f"Bearer {token('dev|esaminando')}"},
        ).json()["esito"]
        bars = page.locator(".exam-chapters .chapter")
        expect(bars).to_have_count(len(result["capitoli"]))
        for index, chapter in enumerate(result["capitoli"]):
            expect(bars.nth(index)).to_contain_text(f"{chapter['capitolo']}. {chapter['titolo']}")
            expect(bars.nth(index)).to_contain_text(f"{chapter['punteggio']}/{chapter['totale']}")
        wrong = page.locator(".exam-wrong .exam-outcome")
        expect(wrong).to_have_count(EXAM_QUESTIONS - 1)
        expect(wrong.last).to_contain_text("Senza risposta")
        for outcome in (o for o in result["esiti"] if not o["corretta"]):
            item = page.locator(
                f'.exam-outcome[data-question="{outcome["capitolo"]}-{outcome["numero"]}"]'
            )
            expect(item.locator(".question")).to_have_text(
                _question(outcome["capitolo"], outcome["numero"])["testo"]
            )
            expect(item).to_contain_text(f"la risposta corretta è {outcome['risposta_corretta']}")
            expect(item.locator(".explanation")).not_to_be_empty()
        problems |= _screens_without_violations(s, "12-exam-result")

        # Each wrong answer's section opens in the side panel.
        first_wrong = next(o for o in result["esiti"] if not o["corretta"] and o["riferimento"])
        link = page.locator(
            f'.exam-outcome[data-question="{first_wrong["capitolo"]}-{first_wrong["numero"]}"]'
            " a.manual-link"
        )
        expect(link).to_have_text(f"Rileggi § {first_wrong['riferimento']}")
        link.click()
        expect(page.locator("#manual-panel")).to_be_visible()
        expect(page.locator("#manual-title")).to_have_text(
            re.compile(rf"^§ {re.escape(first_wrong['riferimento'])} ")
        )
        page.keyboard.press("Escape")

        page.click("#exam-back")
        entry = page.locator(f'#exam-list li[data-exam="{exam_id}"]')
        expect(entry).to_contain_text(f"1/{EXAM_QUESTIONS} · non superata")
        entry.locator("button").click()  # a past exam shows its result again
        expect(page.locator(".exam-score")).to_contain_text(f"1 su {EXAM_QUESTIONS}")
        s.shot("exam-reopened")
    assert problems == {}
    assert s.console_errors == []
    assert s.outside == []


def test_the_exam_works_with_the_keyboard_alone(settings, session_for):
    with _signed_in_for_exams(settings, session_for, "tastiera") as s:
        page = s.page
        page.focus("#nav-exam")
        page.keyboard.press("Enter")
        expect(page.locator("#exam-title")).to_be_focused()
        page.keyboard.press("Tab")
        expect(page.locator("#exam-new")).to_be_focused()
        page.keyboard.press("Enter")
        expect(page.locator("#exam-questions fieldset")).to_have_count(EXAM_QUESTIONS)
        expect(page.locator("#exam-title")).to_be_focused()
        for index in range(EXAM_QUESTIONS):
            page.keyboard.press("Tab")  # into the question's radio group
            group = page.locator("#exam-questions fieldset").nth(index)
            expect(group.locator("input").first).to_be_focused()
            page.keyboard.press("ArrowDown")  # selects the second option
            expect(group.locator("input").nth(1)).to_be_checked()
        expect(page.locator("#exam-answered")).to_contain_text(
            f"{EXAM_QUESTIONS} di {EXAM_QUESTIONS}"
        )
        page.keyboard.press("Tab")
        expect(page.locator("#exam-submit")).to_be_focused()
        page.keyboard.press("Enter")
        expect(page.locator(".exam-verdict")).to_be_focused()
        page.keyboard.press("Tab")  # the first link or button of the result
        expect(page.locator("#exam-result :focus")).to_have_count(1)
        s.shot("exam-keyboard")
    assert s.console_errors == []


def test_exam_answers_chosen_before_a_reload_are_back_when_the_exam_is_taken_up(
    settings, session_for
):
    with _signed_in_for_exams(settings, session_for, "ricarica") as s:
        page = s.page
        page.click("#nav-exam")
        page.click("#exam-new")
        questions = page.locator("#exam-questions fieldset")
        expect(questions).to_have_count(EXAM_QUESTIONS)
        chosen = {}
        for index in (0, 2):
            questions.nth(index).locator("input").nth(1).check()
            chosen[questions.nth(index).get_attribute("data-question")] = (
                questions.nth(index).locator("input").nth(1).get_attribute("value")
            )
        questions.nth(0).locator("input").nth(3).check()  # changed: the last choice counts
        chosen[questions.nth(0).get_attribute("data-question")] = (
            questions.nth(0).locator("input").nth(3).get_attribute("value")
        )
        expect(page.locator("#exam-answered")).to_contain_text(f"2 di {EXAM_QUESTIONS}")

        s.open()  # a reload: the token was in the page's memory only
        s.dev_sign_in("ricarica")
        page.click("#nav-exam")
        page.locator("#exam-list button", has_text="in corso: riprendi").click()
        expect(questions).to_have_count(EXAM_QUESTIONS)
        expect(page.locator("#exam-answered")).to_contain_text(f"2 di {EXAM_QUESTIONS}")
        checked = page.locator("#exam-questions input:checked")
        expect(checked).to_have_count(2)
        for question, letter in chosen.items():
            expect(
                page.locator(f'fieldset[data-question="{question}"] input[value="{letter}"]')
            ).to_be_checked()

        submitted: list[Any] = []
        page.on(
            "request",
            lambda r: r.url.endswith("/submit") and submitted.append(r.post_data_json),
        )
        page.click("#exam-submit")
        expect(page.locator(".exam-verdict")).to_be_visible()
        assert sorted(f"{a['capitolo']}-{a['numero']}" for a in submitted[0]["risposte"]) == (
            sorted(chosen)
        )
        kept = page.evaluate("() => Object.keys(sessionStorage)")
        assert not [key for key in kept if key.startswith("aircoach.exam.")]  # graded: gone
    assert s.console_errors == []


def test_on_a_phone_each_exam_question_sits_inside_its_box(settings, session_for):
    """At 360 px each exam question's text (its fieldset's legend) sat on its box's top
    border, the border drawn through the text: now the whole legend is inside the box."""
    with _signed_in_for_exams(
        settings, session_for, "riquadro", width=360, height=640, phone=3
    ) as s:
        page = s.page
        page.click("#nav-exam")
        page.click("#exam-new")
        questions = page.locator("#exam-questions fieldset")
        expect(questions).to_have_count(EXAM_QUESTIONS)
        for fieldset in questions.all():
            # The legend's top, and the top of the box's inside (below its border).
            legend, inside = fieldset.evaluate(
                """(set) => [set.querySelector("legend").getBoundingClientRect().top,
                    set.getBoundingClientRect().top + parseFloat(getComputedStyle(set).borderTopWidth)]"""
            )
            assert legend >= inside, (fieldset.get_attribute("data-question"), legend, inside)
        s.shot("exam-questions-phone")
    assert s.console_errors == []


def test_a_review_that_cannot_load_says_so_in_its_view_and_loads_on_retry(settings, session_for):
    """With the network down the view showed "Altre domande da ripassare" alone (its notice at
    the page's top, off a phone's screen)."""
    with served(app_with(settings)) as origin:
        s = session_for(origin, width=360, height=640, phone=3)
        s.open()
        s.dev_sign_in("senza-rete")
        page = s.page
        page.route(re.compile(r".*/api/quiz/review.*"), lambda route: route.abort("failed"))
        page.click("#nav-review")
        failed = page.locator("#review-cards #review-failed")
        expect(failed).to_contain_text("Le domande da ripassare non sono arrivate. Errore di rete")
        expect(page.locator("#review-more")).to_be_hidden()
        expect(page.locator("#notices .notice")).to_have_count(0)
        page.unroute(re.compile(r".*/api/quiz/review.*"))
        failed.get_by_role("button", name="Riprova").click()
        expect(page.locator("#review-cards .review-card")).not_to_have_count(0)
        expect(failed).to_have_count(0)


def test_the_review_view_shows_the_due_questions_answered_through_the_quiz_api(
    settings, session_for, token
):
    with served(app_with(settings)) as origin:
        # A question answered wrong is due at once.
        right = _key(1, 1)
        wrong_letter = next(x for x in _question(1, 1)["risposte"] if x != right)
        answered = httpx.post(
            f"{origin}/api/quiz/answers",
            json={"capitolo": 1, "numero": 1, "risposta": wrong_letter},
            headers={"Authorization": f"Bearer {token('dev|ripasso')}"},
        )
        assert answered.status_code == 200, answered.text
        s = session_for(origin)
        s.open()
        s.dev_sign_in("ripasso")
        page = s.page
        bodies: list[Any] = []
        page.on(
            "request",
            lambda r: r.url.endswith("/api/quiz/answers") and bodies.append(r.post_data_json),
        )
        page.locator("#welcome").get_by_role("button", name="Ripasso", exact=True).click()
        expect(page.locator("#review-view")).to_be_visible()
        expect(page.locator("#review-title")).to_be_focused()
        card = page.locator("#review-cards article.review-card").first
        expect(card).to_have_attribute("data-question", "1-1")
        expect(card).to_contain_text("da ripassare")
        expect(card.locator(".question")).to_have_text(_question(1, 1)["testo"])
        problems = _screens_without_violations(s, "13-review")

        card.locator(f'button.option[data-letter="{wrong_letter}"]').click()
        result = card.locator(".result")
        expect(result).to_have_attribute("data-corretta", "false")
        expect(card.locator("button.option.wrong")).to_have_attribute("data-letter", wrong_letter)
        expect(card.locator("button.option.correct")).to_have_attribute("data-letter", right)
        assert _background(card.locator("button.option.wrong")) == "rgb(253, 236, 235)"
        expect(card.locator(".explanation")).not_to_be_empty()
        assert bodies == [{"capitolo": 1, "numero": 1, "risposta": wrong_letter}]
        problems |= _screens_without_violations(s, "14-review-answered")

        # The answer counts in the progress like any other.
        page.click("#nav-progress")
        expect(page.locator('#progress .chapter[data-capitolo="1"]')).to_have_attribute(
            "data-risposte", "2"
        )
        # Back in the review, the question answered wrong again is due again.
        page.click("#nav-review")
        expect(page.locator("#review-cards article.review-card").first).to_have_attribute(
            "data-question", "1-1"
        )
        expect(page.locator("#review-cards .result")).to_have_count(0)
    assert problems == {}
    assert s.console_errors == []


def test_more_questions_to_review_fetches_the_next_page_then_says_there_are_no_more(
    settings, session_for
):
    """ "Altre domande da ripassare" asks for the page after the one on screen (`cursor`: the
    `next_cursor` of the last page) and shows other questions; on the last page (no
    `next_cursor`) the button goes and the page says there are no more (before, it asked for
    the first page again and showed the same questions)."""
    asked: list[str] = []
    last = {"page": False}

    def review(route: Any) -> None:
        asked.append(route.request.url)
        response = route.fetch()
        body = response.json()
        if last["page"]:
            body["next_cursor"] = None
        route.fulfill(response=response, json=body)

    with served(app_with(settings)) as origin:
        s = session_for(origin)
        s.open()
        s.dev_sign_in("pagine")
        page = s.page
        page.route(re.compile(r"/api/quiz/review\?"), review)
        page.click("#nav-review")
        cards = page.locator("#review-cards article.review-card")
        expect(cards).to_have_count(5)
        first = [c.get_attribute("data-question") for c in cards.all()]
        more = page.locator("#review-more")
        with page.expect_response(re.compile(r"/api/quiz/review\?")):
            more.click()
        expect(cards.first).not_to_have_attribute("data-question", first[0])
        expect(cards).to_have_count(5)
        second = [c.get_attribute("data-question") for c in cards.all()]
        assert not set(first) & set(second), (first, second)
        assert "cursor=" not in asked[0] and "cursor=" in asked[1]
        expect(cards.first).to_be_focused()

        last["page"] = True
        with page.expect_response(re.compile(r"/api/quiz/review\?")):
            more.click()
        expect(more).to_be_hidden()
        expect(page.locator("#review-end")).to_have_text(
            "Non ci sono altre domande da ripassare per ora."
        )
        third = [c.get_attribute("data-question") for c in cards.all()]
        assert not (set(first) | set(second)) & set(third), third
        s.shot("review-no-more")
    assert s.console_errors == []


def test_two_conversations_each_with_its_own_history(settings, session_for):
    script = Script([text("Risposta uno."), text("Risposta due."), text("Risposta tre.")])
    with served(app_with(settings, models=ScriptedModels(script))) as origin:
        s = session_for(origin)
        s.open()
        s.dev_sign_in("conversatore")
        page = s.page
        bodies: list[Any] = []
        page.on(
            "request",
            lambda r: r.url.endswith("/api/stream_query") and bodies.append(r.post_data_json),
        )
        chats = page.locator("#conversations button.conversation")
        expect(chats).to_have_count(1)
        expect(chats.first).to_have_text("Chat principale")
        expect(chats.first).to_have_attribute("aria-current", "true")
        s.answered(s.ask("Prima domanda"))

        page.click("#new-chat")
        expect(page.locator("#turns > li")).to_have_count(0)
        expect(page.locator("#welcome")).to_be_visible()
        expect(chats).to_have_count(2)
        expect(chats.nth(1)).to_have_attribute("aria-current", "true")
        turn = s.answered(s.ask("Seconda domanda"))
        expect(turn.locator(".answer")).to_have_text("Risposta due.")
        expect(chats.nth(1)).to_have_text("Seconda domanda")
        s.answered(s.ask("Terza domanda"))
        conversation = bodies[1].get("conversation_id")
        assert "conversation_id" not in bodies[0]
        assert re.fullmatch(r"[0-9a-f]{32}", conversation or ""), bodies[1]
        assert bodies[2]["conversation_id"] == conversation
        problems = _screens_without_violations(s, "15-conversations")

        chats.first.click()  # the default conversation: only its own turn
        expect(chats.first).to_have_attribute("aria-current", "true")
        expect(page.locator("#turns .human")).to_have_text(["Prima domanda"])
        expect(page.locator("#turns .answer")).to_have_text(["Risposta uno."])
        page.locator(f'#conversations button[data-conversation="{conversation}"]').click()
        expect(page.locator("#turns .human")).to_have_text(["Seconda domanda", "Terza domanda"])
        expect(page.locator("#turns .answer")).to_have_text(["Risposta due.", "Risposta tre."])
    script.assert_used()
    assert problems == {}
    assert s.console_errors == []


def test_on_a_phone_the_conversations_are_one_row_that_scrolls_sideways(
    settings, session_for, token
):
    """With a few conversations the list wrapped, one question a row, and filled a phone's
    first screen before the chat began; now it is one row of chips that scrolls sideways
    inside itself (the page still does not), each chip cut to the screen."""
    with served(app_with(settings)) as origin:
        headers = {"Authorization": f"Bearer {token('dev|tante')}"}
        for n in range(8):
            response = httpx.post(
                f"{origin}/api/stream_query",
                json={
                    "query": f"Cos'è il QNH e come si imposta l'altimetro? (chat {n})",
                    "stream": False,
                    "conversation_id": f"chat{n}",
                },
                headers=headers,
                timeout=30,
            )
            assert response.status_code == 200, response.text
        s = session_for(origin, width=360, height=640, phone=3)
        s.open()
        s.dev_sign_in("tante")
        page = s.page
        chips = page.locator("#conversations button")
        expect(chips).to_have_count(9)
        tops = {round(chip.bounding_box()["y"]) for chip in chips.all()}
        assert len(tops) == 1, tops
        assert page.locator(".conversations").bounding_box()["height"] < 640 / 4
        widths = page.evaluate(
            "() => [document.documentElement.scrollWidth, document.documentElement.clientWidth]"
        )
        assert widths == [360, 360]
        last = chips.last
        last.scroll_into_view_if_needed()
        last.click()
        expect(last).to_have_attribute("aria-current", "true")
        expect(page.locator("#turns > li")).to_have_count(1)
        # The list, drawn again after the switch, still shows the chosen chat in its row.
        chosen = page.locator('#conversations button[aria-current="true"]')
        expect(chosen).to_have_attribute("data-conversation", "chat0")
        row = page.locator("#conversations").bounding_box()
        box = chosen.bounding_box()
        assert (
            row["x"] - 0.5 <= box["x"] and box["x"] + box["width"] <= row["x"] + row["width"] + 0.5
        )
        s.shot("phone-conversations")
    assert s.console_errors == []
