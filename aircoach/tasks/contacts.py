"""Customer status, never the model's: a deterministic lookup of the sender in the contacts
(exact address, then the organisation of its domain, else none)."""

from __future__ import annotations

import json
from pathlib import Path

from aircoach.tasks.ports import ContactStore
from aircoach.tasks.records import Contact, Customer

DEMO_CONTACTS = Path(__file__).resolve().parent.parent / "data" / "contacts_demo.json"


async def lookup_customer(contacts: ContactStore, address: str | None) -> Customer:
    """`address` is already parsed and lowercased (None when the sender has none)."""
    if not address:
        return Customer(status="new", match="none")
    exact = await contacts.find_contact(f"email:{address}")
    if exact is not None:
        return Customer(status="existing", match="exact", contact=_public(exact))
    domain = address.rpartition("@")[2]
    organisation = await contacts.find_contact(f"domain:{domain}")
    if organisation is not None:
        return Customer(status="existing", match="domain", contact=_public(organisation))
    return Customer(status="new", match="none")


def _public(contact: Contact) -> dict[str, object]:
    return contact.model_dump(exclude_none=True)


def demo_contacts() -> list[Contact]:
    return [Contact.model_validate(c) for c in json.loads(DEMO_CONTACTS.read_text("utf-8"))]


async def seed_demo_contacts(contacts: ContactStore) -> int:
    """Load the demo contacts (idempotent: same keys are replaced)."""
    return await contacts.upsert_contacts(demo_contacts())
