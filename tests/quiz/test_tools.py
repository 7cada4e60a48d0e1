"""domanda_teoria: every branch of its priority order and every validation error."""

from __future__ import annotations

import pytest

from aircoach.quiz.bank import seed_demo_questions
from aircoach.quiz.tools import domanda_teoria
from aircoach.store.sqlite import SqliteQuizStore
from aircoach.tools.registry import ToolContext


@pytest.fixture
async def ctx(settings, tmp_path):
    quiz = SqliteQuizStore(tmp_path / "quiz.sqlite3")
    assert await seed_demo_questions(quiz) >= 100
    return ToolContext(quiz=quiz, user_id="u")


async def test_demo_questions_cover_ten_chapters_and_load_once(ctx):
    assert await ctx.quiz.count() >= 100
    assert await seed_demo_questions(ctx.quiz) == 0  # not empty any more: nothing to do
    for chapter in range(1, 11):
        assert (await ctx.quiz.random_by_field("capitolo", chapter))["capitolo"] == chapter


async def test_chapter_and_number_give_that_question(ctx):
    out = await domanda_teoria(ctx, capitolo=7, numero=2)
    q = out.data["question"]
    assert out.ok and (q["capitolo"], q["numero"]) == (7, 2)
    assert out.data["query"]["mode"] == "capitolo_numero"
    assert q["testo"] in out.text and "a) " in out.text


async def test_chapter_and_number_beat_every_other_argument(ctx):
    out = await domanda_teoria(
        ctx, capitolo=2, numero=1, testo="altimetro", campo="difficolta", valore="facile"
    )
    assert (out.data["question"]["capitolo"], out.data["question"]["numero"]) == (2, 1)


async def test_text_search_is_case_insensitive_and_beats_field(ctx):
    out = await domanda_teoria(ctx, testo="ALTIMETRO", campo="capitolo", valore="9", capitolo=9)
    assert out.data["query"]["mode"] == "testo" and out.data["query"]["matches"] > 0
    assert "altimetro" in out.data["question"]["testo"].casefold()


async def test_field_and_value_beat_chapter(ctx):
    out = await domanda_teoria(ctx, campo="difficolta", valore="Difficile", capitolo=1)
    assert out.data["query"]["mode"] == "campo"
    assert out.data["question"]["difficolta"] == "difficile"


async def test_chapter_alone_gives_a_question_of_that_chapter(ctx):
    for _ in range(5):
        out = await domanda_teoria(ctx, capitolo="4")
        assert out.data["question"]["capitolo"] == 4 and out.data["query"]["mode"] == "capitolo"


async def test_no_arguments_give_a_random_question(ctx):
    seen = {
        (o.data["question"]["capitolo"], o.data["question"]["numero"])
        for o in [await domanda_teoria(ctx) for _ in range(15)]
    }
    assert len(seen) > 1


async def test_no_match_is_a_result_not_an_error(ctx):
    out = await domanda_teoria(ctx, testo="zzzqqq inesistente")
    assert out.ok and out.data["question"] is None and out.data["query"]["matches"] == 0
    out = await domanda_teoria(ctx, capitolo=1, numero=999)
    assert out.ok and out.data["question"] is None


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ({"capitolo": 0}, "capitolo must be between 1 and 10"),
        ({"capitolo": 11}, "capitolo must be between 1 and 10"),
        ({"capitolo": "tre"}, "capitolo must be a whole number"),
        ({"capitolo": True}, "capitolo must be a whole number"),
        ({"capitolo": 2.5}, "capitolo must be a whole number"),
        ({"capitolo": 1, "numero": 0}, "numero must be 1 or more"),
        ({"capitolo": 1, "numero": "x"}, "numero must be a whole number"),
        ({"numero": 3}, "numero needs capitolo"),
        ({"campo": "argomento"}, "campo and valore go together"),
        ({"valore": "meteo"}, "campo and valore go together"),
        ({"campo": "password", "valore": "x"}, "campo 'password' is not searchable"),
        ({"campo": "argomento", "valore": "  "}, "valore must not be empty"),
        ({"testo": "ab"}, "testo must be at least 3 characters"),
        ({"testo": "   a  "}, "testo must be at least 3 characters"),
    ],
)
async def test_invalid_arguments_become_a_tool_error(ctx, args, message):
    out = await domanda_teoria(ctx, **args)
    assert not out.ok and message in out.data["error"]
    assert out.text.startswith("[Tool domanda_teoria failed:") and message in out.text
