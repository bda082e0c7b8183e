"""First-person questions a store never answered, and a store of unrelated hobby messages
to ask them of (``bench.noise``'s ``first_person`` set).

A question is never said for a store when none of its topic words occurs in the store's
texts (:func:`never_said`): "what is my wife's name?" is asked of a LoCoMo store only if
no turn of it says "wife", "husband", "married" or "spouse". The hobby messages
(:func:`hobby_messages`) are built from activities, phrasings and endings that hold no
topic word of any question, which :func:`hobby_messages` checks.
"""

from __future__ import annotations

import random
import re
from collections.abc import Iterable, Sequence

#: (question, topic words): the question is never said by a store none of whose texts
#: holds one of the words (whole words, any case).
FIRST_PERSON_QUESTIONS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("what is my wife's name?", ("wife", "husband", "married", "spouse")),
    ("where was I born?", ("born", "birthplace", "hometown")),
    ("which car do I drive?", ("car", "cars", "drive", "drives", "driving")),
    ("Who is my dentist?", ("dentist", "teeth")),
    ("What is my blood type?", ("blood",)),
    ("When does my passport expire?", ("passport",)),
    ("What is my mortgage rate?", ("mortgage",)),
    ("What's my landlord's name?", ("landlord", "landlady")),
    ("How much is my salary?", ("salary", "paid", "earn")),
    ("What is my sister's phone number?", ("sister", "phone", "number")),
    ("Which insurance company am I with?", ("insurance", "insurer")),
    ("What shoe size do I wear?", ("shoe", "shoes", "size")),
    ("When is my wedding anniversary?", ("wedding", "anniversary", "married")),
    ("What's my zodiac sign?", ("zodiac", "horoscope", "sign")),
    ("Which vaccines have I had?", ("vaccine", "vaccines", "vaccinated", "jab")),
    ("What is my grandmother's maiden name?", ("grandmother", "grandma", "maiden")),
    ("Where does my niece go to school?", ("niece",)),
    ("How much rent do I pay?", ("rent", "pay")),
    ("What is my glasses prescription?", ("glasses", "prescription", "optician")),
    ("Which bank am I with?", ("bank", "banking")),
)

_ACTIVITIES = (
    "repaint old bicycles", "bake sourdough bread", "knit wool scarves", "play chess online",
    "grow tomatoes on the balcony", "collect vintage stamps", "go bouldering",
    "paint watercolour landscapes", "build model ships", "practise the cello", "write haiku",
    "restore antique clocks", "brew my own beer", "watch birds at the lake", "do jigsaw puzzles",
    "learn Japanese calligraphy", "play the ukulele", "make pottery", "fly kites", "go trail running",
    "sew quilts", "carve wooden spoons", "play board games", "photograph old buildings",
    "swim in the lake", "keep bees", "solve crosswords", "practise yoga", "bind books by hand",
    "play tennis", "go fishing", "forage for mushrooms", "fold origami cranes", "juggle",
    "sing in a choir", "cook Thai curries", "ride my unicycle", "paint miniature figures",
    "play table tennis", "assemble Lego castles",
)
_PHRASINGS = (
    "I {a}{e} on weekends.", "Lately I {a}{e} most evenings.", "My favourite way to relax is to {a}{e}.",
    "I started to {a}{e} last year.", "On Sundays I {a}{e}.", "I try to {a}{e} twice a week.",
    "Nothing beats the chance to {a}{e} after work.", "I want to {a}{e} more often this summer.",
    "A friend taught me to {a}{e}.", "I spent the whole afternoon trying to {a}{e}.",
)
_ENDINGS = ("", " again", " with friends", " by myself", " when the weather is good")


def hobby_messages(n: int, seed: int = 7) -> list[str]:
    """``n`` distinct messages about hobbies (at most 2,000), in a fixed shuffled order;
    none holds a topic word of :data:`FIRST_PERSON_QUESTIONS`."""
    every = [p.format(a=a, e=e) for a in _ACTIVITIES for p in _PHRASINGS for e in _ENDINGS]
    if not 0 <= n <= len(every):
        raise ValueError(f"hobby_messages makes at most {len(every)} messages, not {n}")
    random.Random(seed).shuffle(every)
    chosen = every[:n]
    said = [q for q, _ in FIRST_PERSON_QUESTIONS if q not in never_said(chosen)]
    if said:  # the generator's words must never answer a question
        raise AssertionError(f"the hobby messages hold a topic word of {said}")
    return chosen


def never_said(texts: Iterable[str], questions: Sequence[tuple[str, Sequence[str]]] = FIRST_PERSON_QUESTIONS) -> list[str]:
    """The questions none of whose topic words occurs in ``texts``."""
    words = set(re.findall(r"[a-z]+", " ".join(texts).lower()))
    return [q for q, topic in questions if not words & set(topic)]
