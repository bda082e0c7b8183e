"""Normalisation of triples, pure functions of text: matching keys of entities and
predicates, how a predicate is shown, the indexes' text, the entities a query names.
"""

from __future__ import annotations

import re

#: Entity key every way of naming the user folds into, so "I", "me" and "User"
#: are one node of the graph.
USER_ENTITY = "user"
_SELF_NAMES = frozenset({"i", "me", "myself", "user", "the user"})
# Query words that point at the user's own node ("what do *I* like?").
_SELF_WORDS = frozenset({"i", "me", "my", "mine", "myself"})

_WORDS = re.compile(r"\w+")
_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")
_POSSESSIVE = re.compile(r"['’]s\b", re.IGNORECASE)
# Auxiliaries and articles carry no meaning in a predicate's key: "is married to"
# and "married to" are one relation, "has a friend" and "has friend" too.
_PREDICATE_FILLER = frozenset({"a", "an", "the"})
_AUXILIARY = "be"
_IRREGULAR = {
    "is": "be", "are": "be", "was": "be", "were": "be", "am": "be", "been": "be", "being": "be",
    "has": "have", "had": "have", "having": "have",
    "does": "do", "did": "do", "done": "do", "doing": "do",
    "goes": "go", "went": "go", "gone": "go", "going": "go",
    "made": "make", "bought": "buy", "knew": "know", "known": "know", "met": "meet",
    "taught": "teach", "grew": "grow", "grown": "grow", "ran": "run", "wrote": "write",
    "written": "write", "ate": "eat", "eaten": "eat", "spoke": "speak", "spoken": "speak",
    "sold": "sell", "thought": "think", "felt": "feel", "kept": "keep", "began": "begin",
    "begun": "begin",
}  # fmt: skip
_VOWELS = frozenset("aeiouy")

# Function words never name an entity: a query's "what" or "it" must not link to a node
# that an odd triple happened to call that.
_NOT_ENTITIES = frozenset(
    "a an and are as at be been but by can could did do does for from had has have he her "
    "hers him his how i if in into is it its me my mine myself of on or our she should so "
    "than that the their them then there these they this to too us was we were what when "
    "where which who whom why will with would you your yours".split()
)


def _stem(word: str) -> str:
    """A cheap, consistent stem of a predicate word (``likes``, ``liked``, ``liking`` all
    give ``lik``): only equality matters, it is never shown."""
    if word in _IRREGULAR:
        word = _IRREGULAR[word]
    elif len(word) > 4 and word.endswith(("ies", "ied")):
        word = word[:-3] + "y"
    elif word.endswith("sses"):
        word = word[:-2]
    elif word.endswith("ing") and len(word) >= 6:
        word = word[:-3]
    elif word.endswith("ed") and len(word) >= 5:
        word = word[:-2]
    elif word.endswith("es") and len(word) >= 5 and word[:-2].endswith(("s", "x", "z", "ch", "sh")):
        word = word[:-2]
    elif word.endswith("s") and not word.endswith(("ss", "us", "is")) and len(word) >= 4:
        word = word[:-1]
    if len(word) > 3 and word.endswith("e"):
        word = word[:-1]  # live/lived/lives meet at "liv"
    if len(word) >= 4 and word[-1] == word[-2] and word[-1] not in _VOWELS:
        word = word[:-1]  # running -> runn -> run; preferred -> preferr -> prefer
    return word


def normalize_predicate(text: str) -> str:
    """The matching key of a predicate: case, separators, auxiliaries, articles and
    simple plural/tense folded. ``"Lives_In"``, ``"lived in"`` and ``"is living in"``
    all give ``"liv_in"``."""
    spaced = _CAMEL.sub(" ", text)
    words = [w for w in _WORDS.findall(spaced.casefold().replace("_", " "))]
    stems = [_stem(w) for w in words if w not in _PREDICATE_FILLER]
    if len(stems) > 1 and stems[0] == _AUXILIARY:
        stems = stems[1:]
    return "_".join(stems)


def normalize_entity(text: str) -> str:
    """The matching key of a subject or object: case, whitespace, punctuation and a
    possessive ``'s`` folded (``"John's"`` and ``"john"`` meet); the ways of naming
    the user ("I", "me", "User") fold into ``"user"``."""
    key = " ".join(_WORDS.findall(_POSSESSIVE.sub("", text).casefold()))
    return USER_ENTITY if key in _SELF_NAMES else key


def display_predicate(text: str) -> str:
    """A predicate as shown: ``lives_in``, ``livesIn`` and ``LIVES_IN`` as ``lives in``;
    a predicate already written in words is kept as it is."""
    if "_" in text or _CAMEL.search(text):
        return " ".join(_CAMEL.sub(" ", text).replace("_", " ").split()).lower()
    return " ".join(text.split())


def search_text(subject: str, predicate: str, obj: str) -> str:
    """What the dense and lexical indexes see of a triple: a plain sentence."""
    return f"{subject} {display_predicate(predicate)} {obj}"


def query_entities(query: str) -> set[str]:
    """Entity keys a query may name: its word n-grams (1 to 4 words, possessives
    dropped) normalised as entities, plus the user's own node for "I", "my"..."""
    words = _WORDS.findall(_POSSESSIVE.sub("", query).casefold())
    grams = {" ".join(words[i : i + n]) for n in range(1, 5) for i in range(len(words) - n + 1)}
    grams = {g for g in grams if g not in _NOT_ENTITIES or g in _SELF_NAMES}
    if _SELF_WORDS & set(words):
        grams.add(USER_ENTITY)
    return {USER_ENTITY if g in _SELF_NAMES else g for g in grams}
