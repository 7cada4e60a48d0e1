"""What a student (or an admin) reads when something fails: every user-facing error message,
in Italian, the product's language and the default, and in English for a request that says
`Accept-Language: en`. One catalogue, so a new message is translated where the others are.

Codes (`invalid_token`, `quota_exceeded`, ...) stay as they are in both languages: clients
branch on them. `WWW-Authenticate` stays ASCII English (`AuthError` builds it from `en`).
A message names the field or the thing at fault, quoted with `!r`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

Language = Literal["it", "en"]
DEFAULT_LANGUAGE: Language = "it"
LANGUAGES: tuple[Language, ...] = ("it", "en")
_MAX_RANGES = 20  # entries of an Accept-Language header looked at


@dataclass(frozen=True)
class Text:
    """One message in both languages: `str.format` templates over the same parameters."""

    it: str
    en: str

    def __call__(self, language: Language, **params: Any) -> str:
        template = self.en if language == "en" else self.it
        return template.format(**params)


CATALOGUE: dict[str, Text] = {
    # --- generic, one per error code ---------------------------------------------------------
    "internal_error": Text(
        it="Si è verificato un errore da parte nostra.",
        en="Something went wrong on our side.",
    ),
    "invalid_token": Text(
        it="Token di accesso mancante o non valido.",
        en="Missing or invalid bearer token.",
    ),
    "missing_token": Text(
        it="Serve un token di accesso (intestazione Authorization: Bearer).",
        en="An Authorization: Bearer token is required.",
    ),
    "invalid_signature": Text(
        it="La firma del webhook manca, è scaduta o non corrisponde.",
        en="The webhook signature is missing, stale or does not match.",
    ),
    "forbidden": Text(
        it="Il token non ha il permesso necessario per questa operazione.",
        en="This token lacks the permission this operation needs.",
    ),
    "body_too_large": Text(
        it="Il corpo della richiesta supera {limit} byte.",
        en="The request body is larger than {limit} bytes.",
    ),
    "chat_body_too_large": Text(
        it="Il corpo della richiesta supera {limit} byte: invia solo l'ultimo messaggio, "
        "la conversazione è conservata sul server.",
        en="The request body is larger than {limit} bytes: send the last message alone, "
        "the server keeps the conversation.",
    ),
    "unsupported_media_type": Text(
        it="Il corpo della richiesta deve essere JSON, con l'intestazione "
        "Content-Type: application/json.",
        en="The request body must be JSON, sent with the header Content-Type: application/json.",
    ),
    "invalid_docs": Text(
        it="I documenti del prompt non sono validi; resta in servizio la versione precedente.",
        en="The prompt docs are invalid; the previous version keeps serving.",
    ),
    "not_found": Text(it="Non trovato.", en="Not found."),
    "method_not_allowed": Text(
        it="Metodo {method} non consentito su questo percorso.",
        en="Method {method} is not allowed on this path.",
    ),
    "bad_request": Text(it="Richiesta non valida.", en="Bad request."),
    "request_head_too_large": Text(
        it="Richiesta non valida: le sue intestazioni superano 16 KB.",
        en="Bad request: its headers are over 16 KB.",
    ),
    "request_unreadable": Text(
        it="Richiesta non valida: non è una richiesta HTTP leggibile.",
        en="Bad request: it is not a readable HTTP request.",
    ),
    "request_timeout": Text(
        it="La richiesta non è arrivata per intero in tempo: inviala di nuovo.",
        en="The request did not arrive whole in time: send it again.",
    ),
    "conflict": Text(
        it="La risorsa non è in uno stato che consente questa operazione.",
        en="The resource is not in a state that allows this operation.",
    ),
    "store_unavailable": Text(
        # Every store's: chats, quiz progress, exams, tasks (it named the chat history alone).
        it="I dati non sono raggiungibili in questo momento; riprova tra poco.",
        en="The data store is unavailable right now; please retry shortly.",
    ),
    "prompt_unavailable": Text(
        it="Non è stato possibile caricare le istruzioni del coach; riprova tra poco.",
        en="The coach's instructions could not be loaded; please retry shortly.",
    ),
    "auth_unavailable": Text(
        it="La verifica del token non è disponibile in questo momento; riprova tra poco.",
        en="Token verification is unavailable right now; please retry shortly.",
    ),
    "model_unavailable": Text(
        it="Il modello linguistico non è disponibile in questo momento; riprova tra poco.",
        en="The language model is unavailable right now; please retry in a moment.",
    ),
    "invalid_request": Text(
        it="La richiesta non è valida: controlla il campo {field!r}.",
        en="The request is not valid: see the field {field!r}.",
    ),
    "invalid_request_body": Text(
        it="Il corpo della richiesta non è un JSON valido.",
        en="The request body is not valid JSON.",
    ),
    # --- tokens (the English text is also the WWW-Authenticate reason) -----------------------
    "malformed_token": Text(it="Token malformato.", en="malformed token"),
    "algorithm_refused": Text(
        it="Algoritmo del token {alg} non accettato.", en="algorithm {alg} is not accepted"
    ),
    "kid_not_string": Text(
        it="L'intestazione 'kid' del token deve essere una stringa.",
        en="token header 'kid' must be a string",
    ),
    "no_kid": Text(it="L'intestazione del token non ha 'kid'.", en="token header has no 'kid'"),
    "unknown_kid": Text(
        it="La chiave di firma {kid} non è tra le chiavi (JWKS) del tenant.",
        en="signing key {kid} is not in the tenant's JWKS",
    ),
    "token_expired": Text(it="Token scaduto: accedi di nuovo.", en="token expired"),
    "wrong_audience": Text(
        it="Il token è stato emesso per un'altra API (audience errata).", en="wrong audience"
    ),
    "wrong_issuer": Text(
        it="Il token è stato emesso da un altro emittente (issuer errato).", en="wrong issuer"
    ),
    "token_not_yet_valid": Text(it="Il token non è ancora valido.", en="token not yet valid"),
    # Every refusal PyJWT knows has its own key; this one is for a reason it adds later (its
    # English text may quote the token, so it is logged, never shown).
    "token_invalid": Text(it="Token non valido: accedi di nuovo.", en="invalid token"),
    "no_alg": Text(it="L'intestazione del token non ha 'alg'.", en="token header has no 'alg'"),
    "critical_header_refused": Text(
        it="Il token richiede estensioni (intestazione 'crit') che questo server non supporta.",
        en="token header 'crit' names extensions this server does not support",
    ),
    "claim_not_string": Text(
        it="Il claim {name!r} del token deve essere una stringa.",
        en="claim {name!r} must be a string",
    ),
    # The two reasons a token of the right issuer meets most, said in Italian (PyJWT's reason
    # is English; it stays the English text, which WWW-Authenticate carries).
    "signature_mismatch": Text(
        it="La firma del token non corrisponde: accedi di nuovo.",
        en="invalid token: Signature verification failed",
    ),
    "claim_missing": Text(
        it="Nel token manca il claim {claim!r}: accedi di nuovo.",
        en="invalid token: the {claim!r} claim is missing",
    ),
    "claim_not_integer": Text(
        it="Il claim {name!r} del token deve essere un numero intero.",
        en="claim {name!r} must be an integer",
    ),
    "no_subject": Text(it="Il token non ha un soggetto (sub).", en="token has no subject"),
    "subject_control_characters": Text(
        it="Il soggetto (sub) del token contiene caratteri di controllo.",
        en="token subject has control characters",
    ),
    "not_dev_issuer": Text(
        it="Il token non è firmato dall'emittente di sviluppo.",
        en="token was not signed by the dev issuer",
    ),
    "dev_key_invalid": Text(
        it="Il file della chiave dell'emittente di sviluppo non contiene una chiave RSA.",
        en="the dev issuer's key file does not hold an RSA key",
    ),
    # --- the signed update_docs webhook ------------------------------------------------------
    "webhook_not_configured": Text(
        it="Questo server non accetta chiamate webhook firmate.",
        en="signed webhook calls are not configured on this server",
    ),
    "webhook_headers_required": Text(
        it="Servono entrambe le intestazioni {timestamp!r} e {signature!r}.",
        en="both {timestamp!r} and {signature!r} are required",
    ),
    "webhook_timestamp_not_unix": Text(
        it="{header!r} deve essere in secondi Unix.", en="{header!r} must be unix seconds"
    ),
    "webhook_signature_mismatch": Text(
        it="{header!r} non corrisponde al corpo: va scritta sha256=<hex>, l'HMAC-SHA256 di "
        "«timestamp.corpo» con il segreto.",
        en="{header!r} does not match the body: it is sha256=<hex>, the HMAC-SHA256 of "
        "'timestamp.body' with the secret",
    ),
    "webhook_timestamp_skew": Text(
        it="{header!r} dista più di {max_skew_s:g} s dall'ora attuale.",
        en="{header!r} is more than {max_skew_s:g} s from now",
    ),
    # --- permissions, docs, lookups ----------------------------------------------------------
    "permission_needed": Text(
        it="Questa operazione richiede il permesso {permission!r}.",
        en="this operation needs the {permission!r} permission",
    ),
    "docs_invalid_detail": Text(
        it="Documenti non validi (resta in servizio la versione precedente): {detail}",
        en="{detail}",
    ),
    "exam_not_found": Text(
        it="Nessuna tua simulazione d'esame con questo id.",
        en="No mock exam of yours with this id.",
    ),
    "exam_submitted": Text(
        it="Questa simulazione d'esame è già stata consegnata.",
        en="This mock exam was handed in already.",
    ),
    "exam_grading": Text(
        it="Questa simulazione d'esame è ancora in correzione: se non si conclude, potrai "
        "consegnarla di nuovo tra {retry_after} s.",
        en="This mock exam is still being graded: if that does not finish, you may hand it "
        "in again in {retry_after} s.",
    ),
    "question_not_found": Text(
        it="Domanda {numero} del capitolo {capitolo} non trovata.",
        en="Question {numero} of chapter {capitolo} not found.",
    ),
    "conversation_not_found": Text(
        it="Nessuna tua conversazione con id {conversation_id!r}.",
        en="No conversation {conversation_id!r} of yours.",
    ),
    "turn_not_found": Text(
        it="Nessun tuo turno con id {turn_id!r}.", en="No turn {turn_id!r} of yours."
    ),
    "unknown_task": Text(
        it="Task {task!r} sconosciuto; disponibili: {valid}.",
        en="unknown task {task!r}; valid: {valid}",
    ),
    "no_review_item": Text(
        it="Nessun elemento da revisionare con id {review_id!r}.",
        en="no review item {review_id!r}",
    ),
    "review_item_resolved": Text(
        it="L'elemento {review_id!r} è già stato risolto.",
        en="review item {review_id!r} is resolved already",
    ),
    "review_item_dismissed": Text(
        it="L'elemento {review_id!r} è stato archiviato senza risultato.",
        en="review item {review_id!r} was dismissed",
    ),
    "review_run_missing": Text(
        it="L'esecuzione {run_id!r} che ha messo in coda l'elemento {review_id!r} non è stata "
        "salvata: non c'è un risultato da confermare o correggere. Archivia l'elemento "
        "(dismiss).",
        en="run {run_id!r}, which queued review item {review_id!r}, was never stored: there is "
        "no run to confirm or correct; dismiss the item",
    ),
    "task_gone": Text(
        it="Il task {task!r} non è più nei documenti.", en="task {task!r} is no longer in the docs"
    ),
    "no_run": Text(it="Nessuna esecuzione con id {run_id!r}.", en="no run {run_id!r}"),
    "task_failed": Text(
        it="Nessun risultato valido dopo tutti i tentativi e il modello di riserva; l'input è "
        "conservato per la revisione.",
        en="No valid output after every attempt and the fallback model; the input is kept for "
        "review.",
    ),
    "idempotency_key_reused": Text(
        it="La chiave di idempotenza è già stata usata con un input diverso.",
        en="the Idempotency-Key was used with another input",
    ),
    "idempotency_key_busy": Text(
        it="Una richiesta con la stessa chiave di idempotenza è in corso: riprova tra poco.",
        en="a request with the same Idempotency-Key is running: retry shortly",
    ),
    "invalid_output": Text(
        it="Il risultato non supera la fase {stage!r}.",
        en="the output does not pass the {stage!r} stage",
    ),
    # --- tools and the playground's dev sign-in -----------------------------------------------
    "tool_unavailable": Text(
        it="Non disponibile: il servizio non è configurato su questo server.",
        en="Unavailable: its service is not configured on this server.",
    ),
    "tool_failed": Text(
        # Beside a failed tool result's `error` (for the model, in English); `label` is the
        # tool's name as the tool list shows it to the student.
        it="Lo strumento {label!r} non è riuscito a completare la richiesta.",
        en="The {label!r} tool could not complete the request.",
    ),
    "dev_sign_in_local_only": Text(
        it="L'accesso di prova risponde solo a chi si collega da questa macchina.",
        en="the dev sign-in answers only callers on this machine",
    ),
    "dev_sign_in_same_origin": Text(
        it="L'accesso di prova risponde solo alla pagina del playground di questo server.",
        en="the dev sign-in answers only the playground's own origin",
    ),
    # --- a chat turn -------------------------------------------------------------------------
    "model_empty_answer": Text(
        it="Il modello linguistico ha dato una risposta vuota; riformula la domanda o riprova.",
        en="The language model returned an empty answer; please rephrase or retry.",
    ),
    "turn_timeout": Text(
        it="Il modello linguistico ha impiegato troppo tempo a rispondere; riprova tra poco.",
        en="The language model took too long to answer; please retry in a moment.",
    ),
    "model_failed": Text(
        it="L'assistente non è riuscito a completare questa risposta; riprova.",
        en="The assistant could not complete this answer; please try again.",
    ),
    "persist_failed": Text(
        it="Non è stato possibile salvare la risposta nella tua cronologia.",
        en="Your answer could not be saved to your history.",
    ),
    "thread_busy": Text(
        it="Sto ancora rispondendo al messaggio precedente (turno {turn_id}): attendi la "
        'risposta, oppure annullala o invia con if_busy "interrupt".',
        en="The previous message (turn {turn_id}) is still being answered: wait for it, or "
        'cancel it, or send with if_busy "interrupt".',
    ),
    "conversation_busy": Text(
        it="La conversazione ha ancora una risposta in corso (turno {turn_id}) che si sta "
        "fermando: riprova a eliminarla tra qualche secondo.",
        en="The conversation still has an answer in progress (turn {turn_id}) that is "
        "stopping: retry the delete in a few seconds.",
    ),
    "turn_finished": Text(
        it="Il turno {turn_id} è già concluso: non c'è niente da annullare.",
        en="Turn {turn_id} has ended already: there is nothing to cancel.",
    ),
    "turn_incomplete": Text(
        it="Questa risposta si era interrotta: qui sopra c'è la parte salvata. Invia di nuovo "
        "la domanda per una risposta completa.",
        en="This answer was cut short: above is the part that was kept. Send the question "
        "again for a whole answer.",
    ),
    "turn_in_progress": Text(
        it="Questa domanda (client_message_id {message_id!r}) è ancora in elaborazione; riprova tra "
        "qualche secondo.",
        en="This message (client_message_id {message_id!r}) is still being answered; retry in a few "
        "seconds.",
    ),
    "quota_answers_per_minute": Text(
        it="Hai inviato il massimo di risposte in un minuto ({limit}); riprova tra "
        "{retry_after} s.",
        en="You have sent the most answers allowed in a minute ({limit}); retry in "
        "{retry_after} s.",
    ),
    "quota_per_minute": Text(
        # Worded so that a limit or a wait of 1 reads right (not "1 domande", "1 secondi").
        it="Hai raggiunto il limite di domande al minuto ({limit}); riprova tra {retry_after} s.",
        en="You have reached the per-minute limit of questions ({limit}); retry in "
        "{retry_after} s.",
    ),
    "exam_quota_per_minute": Text(
        it="Hai raggiunto il limite di domande al minuto ({limit}): una simulazione d'esame "
        "conta come una domanda. Riprova tra {retry_after} s.",
        en="You have reached the per-minute limit of questions ({limit}): a mock exam counts as "
        "one question. Retry in {retry_after} s.",
    ),
    "exam_quota_per_day": Text(
        it="Hai raggiunto il limite di domande al giorno ({limit}): una simulazione d'esame "
        "conta come una domanda. Il conteggio riparte a mezzanotte (UTC).",
        en="You have reached the daily limit of questions ({limit}): a mock exam counts as one "
        "question. The count starts again at midnight (UTC).",
    ),
    "quota_per_day": Text(
        it="Hai raggiunto il limite di domande al giorno ({limit}); il conteggio riparte a "
        "mezzanotte (UTC).",
        en="You have reached the daily limit of questions ({limit}); the count starts again at "
        "midnight (UTC).",
    ),
}


def text(key: str, language: Language = DEFAULT_LANGUAGE, **params: Any) -> str:
    """The message `key` in `language`, its `{parameters}` filled in."""
    return CATALOGUE[key](language, **params)


def language(accept_language: str | None) -> Language:
    """The language of a request's messages: Italian, unless its `Accept-Language` prefers
    English (`en`, `en-GB`, `en;q=0.9, it;q=0.5`). Other languages and `*` leave Italian."""
    if not accept_language:
        return DEFAULT_LANGUAGE
    best, best_q = DEFAULT_LANGUAGE, 0.0
    for entry in accept_language.split(",")[:_MAX_RANGES]:
        tag, *params = entry.split(";")
        primary = tag.strip().lower().partition("-")[0]
        if primary not in LANGUAGES:
            continue
        q = 1.0
        for param in params:
            name, _, value = param.strip().partition("=")
            if name.strip().lower() == "q":
                try:
                    q = float(value)
                except ValueError:
                    q = 0.0
        # The first of equal preferences wins, as the header lists them in order.
        if q > best_q:
            best, best_q = primary, q  # type: ignore[assignment]
    return best


def header_language(headers: Any) -> Language:
    """`language` of a Starlette `Headers` (or any mapping with `.get`)."""
    return language(headers.get("accept-language"))
