"""The offline model: a deterministic, network-free stand-in for development and tests.

It is not a language model and says so. Its decisions, in order, are in `respond`: it grades
a pending quiz answer, asks quiz questions, introduces itself to a greeting, declines to show
its instructions, calls another tool whose examples match the request, and searches the
course manual (`kb_search`) for everything else, answering from the best sections with their
ids. It never quotes its system prompt. Replies are streamed word by word.
"""

from __future__ import annotations

import functools
import json
import re
import unicodedata
from collections.abc import AsyncIterator, Iterable, Iterator, Sequence
from typing import Any
from uuid import uuid4

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import (
    AIMessage,
    AIMessageChunk,
    BaseMessage,
    HumanMessage,
    ToolMessage,
)
from langchain_core.messages.tool import tool_call_chunk
from langchain_core.outputs import ChatGeneration, ChatGenerationChunk, ChatResult
from langchain_core.utils.function_calling import convert_to_openai_tool
from pydantic import Field

from aircoach.grounding.style import shaped
from aircoach.knowledge.library import course_chapter_titles, course_chapters
from aircoach.llm import offline_answer, offline_course, offline_exam, offline_quiz
from aircoach.stopwords import STOPWORDS

OFFLINE_NOTICE = "[modello offline]"
_NO_SEARCH = (
    "Non ho informazioni su questo argomento: la ricerca nel manuale del corso non è attiva in "
    "questa richiesta."
)
TOOL_THRESHOLD = 0.5
# Called by their own decisions in `respond`, never by scoring examples.
_DECIDED_TOOLS = frozenset({offline_quiz.ASK, offline_quiz.GRADE, offline_course.KB})
# Every pattern here runs on the user's text, on the event loop: each is linear in it. A quoted
# text cannot hold another opening quote (with `«` allowed inside, 4,000 of them took 370 ms
# of backtracking), and whitespace runs are bounded (`\s*` twice in a row is quadratic).
_TOPIC = re.compile(
    r"\b(?:sull'|sulla|sullo|sulle|sugli|sul|sui|su|riguardo|about)\s{0,3}([\w' ]{3,60})"
)
_QUOTED = re.compile(r'["«“]([^"«“»”]{3,})["»”]')


def _fold(text: str) -> str:
    text = unicodedata.normalize("NFKD", text.casefold())
    return "".join(ch for ch in text if not unicodedata.combining(ch))


# Words whose first five letters are those of a tool's word, and which never ask for the tool:
# "cerca il meteo di domani" drew a quiz question ("domani", "domanda").
_FALSE_FRIENDS = frozenset({"domani"})


def _terms(text: str) -> set[str]:
    words = re.findall(r"[a-z0-9]+", _fold(text))
    return {
        w
        for w in words
        if w not in STOPWORDS and w not in _FALSE_FRIENDS and not w.isdigit() and len(w) > 1
    }


_Indexed = tuple[frozenset[str], frozenset[str]]


def _indexed(terms: set[str] | frozenset[str]) -> _Indexed:
    return frozenset(terms), frozenset(w[:5] for w in terms)


@functools.lru_cache(maxsize=2048)
def _known(text: str) -> _Indexed:
    """The terms and 5-letter stems of a text every request shows the model again (a prompt
    passage, a tool's description or example): computed once, they change only with the
    prompt version. Bounded, since per-user sections come and go."""
    return _indexed(_terms(text))


def _stem_overlap(words: Iterable[str], other: _Indexed) -> int:
    """Words that match a term of `other` exactly or share a 5-letter stem with one
    (domanda/domande, quiz/quizzes)."""
    terms, stems = other
    return sum(1 for w in words if w in terms or (len(w) >= 5 and w[:5] in stems))


def score_tool(query: str, description: str, examples: Sequence[str]) -> float:
    """How well `query` matches a tool: the best share of an example's terms found in it,
    with the description counting for half; deterministic."""
    q = _terms(query)
    if not q:
        return 0.0
    query_index = _indexed(q)
    best = 0.0
    for example in examples:
        e, _ = _known(example)
        if e:
            best = max(best, _stem_overlap(e, query_index) / len(e))
    description_index = _known(description)
    if description_index[0]:
        best = max(best, 0.5 * _stem_overlap(q, description_index) / len(q))
    return best


def fill_arguments(query: str, parameters: dict[str, Any]) -> dict[str, Any]:
    """Read the arguments a JSON Schema asks for from the request text, where they are plain."""
    folded = _fold(query)
    props: dict[str, Any] = parameters.get("properties", {})
    required = set(parameters.get("required", []))
    args: dict[str, Any] = {}
    for name, schema in props.items():
        kind = schema.get("type")
        if kind in ("integer", "number"):
            match = re.search(
                rf"\b{re.escape(_fold(name))}\s{{0,3}}(?:n\.?|numero)?\s{{0,3}}(\d+)", folded
            )
            if match:
                args[name] = int(match.group(1))
        elif kind == "string":
            if "enum" in schema:
                for option in schema["enum"]:
                    if _fold(str(option)) in folded:
                        args[name] = option
                        break
            elif quoted := _QUOTED.search(query):
                args[name] = quoted.group(1).strip()
            elif name in required:
                args[name] = query.strip()
            elif any(
                w in _fold(schema.get("description", "")) for w in ("cercare", "search", "testo")
            ):
                topic = _TOPIC.search(folded)
                if topic:
                    words = [
                        w
                        for w in re.findall(r"[a-z0-9]+", topic.group(1))
                        if len(w) > 2 and w not in STOPWORDS
                    ]
                    if words and len(" ".join(words)) >= 3:
                        args[name] = " ".join(words[:3])
    for name in required - set(args):
        if props.get(name, {}).get("type") == "string":
            args[name] = query.strip()
    return args


def _tool_call(name: str, args: dict[str, Any]) -> dict[str, Any]:
    return {"name": name, "args": args, "id": f"call_{uuid4().hex[:12]}", "type": "tool_call"}


def stream_chunks(message: AIMessage) -> Iterator[ChatGenerationChunk]:
    """A reply as a provider would stream it: each tool call as one chunk, then the text word
    by word (at least one chunk, so an empty reply is still a reply)."""
    for index, call in enumerate(message.tool_calls):
        chunk = tool_call_chunk(
            name=call["name"], args=json.dumps(call["args"]), id=call["id"], index=index
        )
        yield ChatGenerationChunk(message=AIMessageChunk(content="", tool_call_chunks=[chunk]))
    words = re.findall(r"\S+\s*", message.text)
    if not words and not message.tool_calls:
        words = [""]
    for word in words:
        yield ChatGenerationChunk(message=AIMessageChunk(content=word))


class OfflineChatModel(BaseChatModel):
    """Deterministic tool-calling chat model that needs no network."""

    model_name: str = "offline"
    tool_examples: dict[str, list[str]] = Field(default_factory=dict)
    bound_tools: list[dict[str, Any]] = Field(default_factory=list)

    @property
    def _llm_type(self) -> str:
        return "aircoach-offline"

    def __repr_args__(self) -> Any:
        # LangChain hands every model call's callbacks the model's repr (a model that is not
        # serializable); the default one inspects every field's default, a third of the
        # model call's own CPU. The name and the tools' names say which model this is.
        tools = [tool.get("function", {}).get("name") for tool in self.bound_tools]
        return [("model_name", self.model_name), ("tools", tools)]

    def bind_tools(self, tools: Sequence[Any], *, tool_choice: Any = None, **kwargs: Any) -> Any:
        return self.model_copy(update={"bound_tools": [convert_to_openai_tool(t) for t in tools]})

    def respond(self, messages: list[BaseMessage]) -> AIMessage:
        """The reply, decided in this order:

        1. after a tool result, answer from it (a `kb_search` result: its best sentences,
           citing the sections);
        2. a message that answers the quiz question still pending is graded
           (`verifica_risposta`);
        3. a quiz request asks questions (`domanda_teoria`: several at once, review);
        4. a message that only says something of the student ("ho l'esame a marzo") gets
           what the coach takes note of, thanks or an "ok" a short reply; a greeting or a
           question about the coach gets its fixed introduction;
        5. a request for its instructions is declined;
        6. a request that matches another tool's examples calls that tool;
        7. anything else searches the course manual (`kb_search`): a bare follow-up with
           the conversation's topic, a question of several parts part by part (parallel
           calls), and a request with nothing to search gets a clarifying question
           (`offline_course.plan_search`).

        Before 2: a mock exam's steps, a question announced ("ho una domanda": asked for, or
        the question after it answered), the end of the quiz asked ("basta quiz": an "ok", or
        the question after it answered), "perché?" right after a grading (explained from it),
        and "come sto andando?" and "cosa ti ricordi di me?" (answered from the prompt's
        progress and memory sections).
        """
        last = messages[-1] if messages else HumanMessage("")
        if isinstance(last, ToolMessage):
            return self._from_results(messages)
        query = last.text if isinstance(last, HumanMessage) else ""
        # --- the quiz's mock exam (llm/offline_exam.py) ---
        exam_turn = self._exam_turn(messages, query)
        if isinstance(exam_turn, str):
            return self._say(exam_turn)
        if exam_turn is not None:
            return AIMessage("", tool_calls=[exam_turn])
        # --- end of the mock exam's hook ---
        # "Ho una domanda" (the student is about to ask): "Certo, chiedimi pure."; "ho una
        # domanda: cos'è il QNH?": the question after it.
        said, query = offline_course.preface(query)
        if said is None:  # "basta quiz, cos'è il QFE?": the question after it
            said, query = offline_quiz.stops_quiz(query)
        if said is not None:
            return self._say(said)
        # A quiz follow-up right after a grading ("perché?") explains that question.
        if why := offline_quiz.why_of_graded_question(messages, query):
            return self._say(why)  # the study page's "Perché?" button
        asks_why = offline_quiz.asks_why(query) or offline_exam.names_question(query)
        if asks_why and (why := offline_quiz.explain_reply(messages, query)):
            return self._say(why)  # "perché?", "spiegami la 2", "e la 3?" after gradings
        if offline_exam.asks_outcome(query) and self._bound(offline_quiz.GRADE) is not None:
            return self._say(offline_quiz.nothing_graded(messages))  # nothing graded before
        if mistakes := offline_quiz.mistakes_reply(messages, query):  # "quali ho sbagliato?"
            return self._say(mistakes)
        if offline_quiz.asks_progress(query) and self._bound(offline_quiz.ASK) is not None:
            return self._say(offline_quiz.progress_reply(messages))
        if offline_course.asks_memory(query):
            return self._say(offline_course.memory_reply(messages))
        if offline_course.asks_chapters(query):  # "che capitoli ci sono?"
            return self._say(offline_course.chapters_reply(course_chapters()))
        if exam_date := offline_course.exam_date_reply(messages, query):
            return self._say(exam_date)
        if several := self._grade_numbered_answers(messages, query):
            return AIMessage("", tool_calls=several)
        call = self._grade_pending_answer(messages, query)
        if call is None and (one := offline_quiz.two_options_reply(messages, query)):
            return self._say(one)  # "c o d?"
        if call is None and (first := offline_quiz.option_asked_reply(messages, query)):
            return self._say(first)  # "e la c?" before answering
        if call is None and (again := offline_quiz.repeat_reply(messages, query)):
            return self._say(again)  # "ripetimi la domanda"
        hint = offline_quiz.hint_search(messages, query) if call is None else None
        if hint and self._bound(offline_course.KB) is not None:  # "mi dai un suggerimento?"
            return AIMessage("", tool_calls=[_tool_call(offline_course.KB, {"query": hint})])
        if (
            call is None
            and self._bound(offline_quiz.GRADE) is not None
            and (nothing_waits := offline_quiz.no_question_waiting(messages, query))
        ):
            return self._say(nothing_waits)
        if call is None and offline_course.continues_course(messages, query):
            return self._search_course(messages, query)
        if call is None:
            scores = self._scores(query)
            call = self._quiz_request(query, scores, messages)
            if call is None:
                if short := offline_course.note_reply(query) or offline_course.thanks_reply(query):
                    return self._say(short)
                if offline_course.is_greeting(query):
                    return self._say(offline_course.introduction(self._bound_names()))
                if offline_course.asks_for_instructions(query):
                    return self._say(offline_course.DECLINE)
                call = self._pick_tool(scores, query)
                if call is None:
                    return self._search_course(messages, query)
        return AIMessage("", tool_calls=[call])

    @staticmethod
    def _say(text: str) -> AIMessage:
        return AIMessage(f"{OFFLINE_NOTICE} {text}")

    def _bound_names(self) -> list[str]:
        return [tool["function"]["name"] for tool in self.bound_tools]

    def _from_results(self, messages: list[BaseMessage]) -> AIMessage:
        """The answer from the tool results after the last tool-calling message (several
        when a question of several parts was searched part by part)."""
        start = max(i for i, m in enumerate(messages) if not isinstance(m, ToolMessage))
        results = [m for m in messages[start + 1 :] if isinstance(m, ToolMessage)]
        calling = messages[start]
        asked = {
            call["id"]: str(call["args"].get("query", ""))
            for call in (calling.tool_calls if isinstance(calling, AIMessage) else [])
        }
        if len(results) == 1 and offline_exam.is_exam_result(results[0]):
            return self._say(offline_exam.for_the_student(results[0].text))
        if any(r.name != offline_course.KB for r in results):
            # Several gradings ("1a 2b 3c"): one a paragraph.
            return self._say("\n\n".join(self._other_result(r) for r in results))
        if any(r.status == "error" for r in results):
            return self._say("La ricerca nel manuale del corso non è riuscita: riprova tra poco.")
        if offline_quiz.asks_hint(messages):  # "mi dai un suggerimento?"
            found = [(f.ref, f.materia) for r in results for f in offline_answer.results(r.text)]
            return self._say(offline_quiz.hint_reply(found))
        question = next((m.text for m in reversed(messages) if isinstance(m, HumanMessage)), "")
        question = offline_course.preface(question)[1] or question  # "ho una domanda: ..."
        order = list(asked)  # the results come as the searches end; the parts as asked
        results.sort(key=lambda r: order.index(r.tool_call_id) if r.tool_call_id in asked else 0)
        parts = [(asked.get(r.tool_call_id, question) or question, r.text) for r in results]
        if len(parts) == 1:
            searched = parts[0][0]
            composed = offline_answer.answer(
                f"{question} {searched}",
                parts[0][1],
                offline_course.focus(question, searched),
                offline_answer.Asked(
                    told=offline_course.told(messages, question),
                    asking=question,
                    subject=offline_course.moved_to(messages, question),
                ),
            )
            again = offline_course.retry_query(messages, question)
            if composed is None and searched.strip() != offline_course.searchable(again):
                # The topic added to a follow-up found nothing: search the question as asked
                # (a bare one, its topic alone).
                retry = self._search_course(messages, again, plain=True)
                if retry.tool_calls:
                    return retry
        else:
            written = offline_course.part_searches(question)
            composed = offline_answer.answer_parts(
                [(written.get(searched, searched), searched, text) for searched, text in parts],
                offline_course.PART_NOT_FOUND,
            )
        if composed is None:
            return self._say(offline_course.no_match(course_chapters()))
        return self._say(shaped(composed[0], messages))

    @staticmethod
    def _other_result(result: ToolMessage) -> str:
        if (quiz := offline_quiz.result_reply(result)) is not None:
            return quiz
        if result.status == "error":  # the tool's message is for a model, in English
            return "Non sono riuscito a completare la richiesta: prova a riformularla."
        return f"Risultato di {result.name}: {result.text}"

    def _search_course(
        self, messages: list[BaseMessage], query: str, *, plain: bool = False
    ) -> AIMessage:
        """The `kb_search` calls for `query` (one per part of it, run side by side), or a
        clarifying question when it names nothing to search; `plain`: as asked."""
        if self._bound(offline_course.KB) is None or not query.strip():
            return self._say(_NO_SEARCH)
        plan = (
            offline_course.SearchPlan((query.strip(),))
            if plain
            else offline_course.plan_search(messages, query)
        )
        if plan.clarify is not None:
            return self._say(plan.clarify)
        queries = [offline_course.searchable(q) for q in plan.queries]  # a pasted page is cut
        return AIMessage(
            "", tool_calls=[_tool_call(offline_course.KB, {"query": q}) for q in queries]
        )

    def _bound(self, name: str) -> dict[str, Any] | None:
        return next(
            (t["function"] for t in self.bound_tools if t["function"]["name"] == name), None
        )

    def _exam_turn(self, messages: list[BaseMessage], query: str) -> dict[str, Any] | str | None:
        """A mock exam's step: start one, note the student's answers, submit them, or tell
        how the student's exams went."""
        if self._bound(offline_quiz.ASK) is None or self._bound(offline_quiz.GRADE) is None:
            return None
        exam = offline_exam.open_exam(messages)
        grading = offline_exam.last_grading(messages) if exam is None else None
        if grading is not None and (
            reply := offline_exam.grading_reply(grading, query, offline_exam.graded_exam(messages))
        ):
            return reply  # "quali ho sbagliato?", "spiegami la 2" after the grading
        if exam is not None:
            given = offline_exam.numbered(query)
            if offline_exam.hands_in(query, exam_open=True) or (given and not exam.missing):
                return _tool_call(offline_quiz.GRADE, offline_exam.submit_call(exam))
            if given:
                before = offline_exam.open_exam(messages[:-1])
                return offline_exam.progress_note(exam, given, before.answers if before else None)
            if offline_exam.asks_to_hand_in(query):  # "posso consegnare?"
                return f"{offline_exam.MAY_HAND_IN} {offline_exam.progress_note(exam, how=False)}"
            if offline_exam.not_yet(query):  # "non ho ancora finito" (it handed the exam in)
                return f"{offline_exam.NOT_YET} {offline_exam.progress_note(exam, how=False)}"
            if judged := offline_exam.judged_without_letter(query):
                return offline_exam.letter_needed(judged, exam)
            if shown := offline_exam.shown_questions(exam, query):
                return shown  # "ripetimi la 3", "fammi rivedere le domande"
            if offline_exam.asks_missing(query):
                return offline_exam.progress_note(exam)  # "quali mi mancano?"
            if offline_exam.wants_cancel(query):
                return offline_exam.CANNOT_CANCEL
        if offline_exam.asks_past_exams(query, exam_open=exam is not None):
            return _tool_call(offline_quiz.ASK, dict(offline_exam.PAST_CALL))
        if offline_exam.wants_exam(query):
            return _tool_call(offline_quiz.ASK, offline_exam.start_call(query))
        # "consegno" with no exam open is not a manual search; with no exam in the
        # conversation, "ho finito, grazie" is a goodbye.
        if exam is None and (offline_exam.hands_in(query) or offline_exam.asks_to_hand_in(query)):
            goodbye = grading is None and offline_course.thanks_reply(query) is not None
            return None if goodbye else offline_exam.NOTHING_TO_SUBMIT
        return None

    def _grade_pending_answer(
        self, messages: list[BaseMessage], query: str
    ) -> dict[str, Any] | None:
        if self._bound(offline_quiz.GRADE) is None:
            return None
        question = offline_quiz.pending_question(messages)
        if question is None or not offline_quiz.answers(query, question):
            return None
        return _tool_call(offline_quiz.GRADE, offline_quiz.grade_call(query, question))

    def _grade_numbered_answers(
        self, messages: list[BaseMessage], query: str
    ) -> list[dict[str, Any]]:
        """ "1a 2b 3c" to several questions still waiting: one grading each."""
        if self._bound(offline_quiz.GRADE) is None:
            return []
        waiting = offline_quiz.waiting_by_number(messages)
        return [
            _tool_call(offline_quiz.GRADE, args)
            for args in offline_quiz.numbered_answers(query, waiting)
        ]

    def _quiz_request(
        self, query: str, scores: dict[str, float], messages: list[BaseMessage]
    ) -> dict[str, Any] | None:
        ask = self._bound(offline_quiz.ASK)
        if ask is None:
            return None
        another = offline_quiz.wants_another(query)
        asked = offline_quiz.wants_review(query) or offline_quiz.asks_for_question(query)
        if not asked and not another:
            best = max(scores.values(), default=0.0)
            if scores.get(ask["name"], 0.0) < max(best, TOOL_THRESHOLD):
                return None
        base = fill_arguments(query, ask.get("parameters", {}))
        # "una domanda su questo": the chapter of what the conversation was about
        if (
            offline_course.about_this(query)
            and "capitolo" not in base
            and (chapter := offline_course.last_searched_chapter(messages))
        ):
            base.pop("testo", None)
            base["capitolo"] = chapter
        # "un'altra": the same chapter unless it names one, or a subject ("un'altra sul vento")
        if another and not offline_quiz.names_subject(base.get("testo")):
            base.pop("testo", None)
            if "capitolo" not in base and (chapter := offline_quiz.last_chapter(messages)):
                base["capitolo"] = chapter
        return _tool_call(
            ask["name"], offline_quiz.quiz_arguments(query, base, course_chapter_titles())
        )

    def _scores(self, query: str) -> dict[str, float]:
        return {
            fn["name"]: score_tool(
                query, fn.get("description", ""), self.tool_examples.get(fn["name"], [])
            )
            for fn in (tool["function"] for tool in self.bound_tools)
        }

    def _pick_tool(self, scores: dict[str, float], query: str) -> dict[str, Any] | None:
        """The tool whose examples match best (ties: the first declared), above the threshold;
        the quiz's tools and the course search are left to their own decisions."""
        scores = {name: v for name, v in scores.items() if name not in _DECIDED_TOOLS}
        name = max(scores, key=lambda n: scores[n], default=None)
        if name is None or scores[name] < TOOL_THRESHOLD:
            return None
        fn = self._bound(name)
        assert fn is not None
        return _tool_call(name, fill_arguments(query, fn.get("parameters", {})))

    def _generate(
        self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kw: Any
    ) -> ChatResult:
        return ChatResult(generations=[ChatGeneration(message=self.respond(messages))])

    async def _agenerate(
        self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kw: Any
    ) -> ChatResult:
        return self._generate(messages)

    def _chunks(self, messages: list[BaseMessage]) -> Iterator[ChatGenerationChunk]:
        return stream_chunks(self.respond(messages))

    def _stream(
        self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kw: Any
    ) -> Iterator[ChatGenerationChunk]:
        yield from self._chunks(messages)

    async def _astream(
        self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kw: Any
    ) -> AsyncIterator[ChatGenerationChunk]:
        for chunk in self._chunks(messages):
            yield chunk
