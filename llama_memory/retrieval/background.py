"""The query's background: how close a question sits to everyday chat about nothing in
particular, whatever the store holds.

Some questions are near everything a person says ("How's it going at work?"), others
near nothing ("What's my blood type?"): the same cosine means more for the second. The
relevance calibration (:mod:`llama_memory.retrieval.relevance`) weighs a record's cosine
against the question's background, the mean of its :data:`BACKGROUND_TOP` best cosines
with a fixed bank of neutral chat sentences shipped here (:data:`NEUTRAL_CHAT`, written
for this and about no one). It depends on the question and the model only, never on
the store, so a score means the same in a store of 3 records and in one of 2,000.

The bank is embedded once per model object (:func:`bank_vectors`), and each question's
background costs one product of a 100 x dimension matrix with its vector.
"""

from __future__ import annotations

import threading
import weakref
from typing import Any, Protocol

import numpy as np

from .vectors import unit

#: How many of the bank's closest sentences make a question's background.
BACKGROUND_TOP = 5

#: Neutral chat: what people say and are told in passing (weather, errands, work,
#: evenings), about no one in particular, and a few of an assistant's replies.
NEUTRAL_CHAT: tuple[str, ...] = (
    'The weather has been really grey all week.',
    'I finally finished that report I was working on.',
    'We had pasta for dinner again last night.',
    'Traffic on the way in this morning was terrible.',
    'I think I need a new pair of headphones.',
    'My phone battery keeps dying in the afternoon.',
    'We watched a documentary about whales yesterday.',
    "I'm trying to drink more water during the day.",
    'The train was twenty minutes late again.',
    'I spent the whole weekend cleaning the garage.',
    'Our neighbours are having their roof redone.',
    'I bought a new plant for the living room.',
    'I should really reply to all those emails.',
    'The meeting ran way over time today.',
    'I tried a new recipe for banana bread.',
    "It's been ages since I read a good book.",
    "We're thinking about repainting the kitchen.",
    'I went for a short walk after lunch.',
    'My laptop has been really slow lately.',
    "I can't decide what to watch tonight.",
    'The supermarket was packed this morning.',
    'I need to renew my library card.',
    'We had friends over for board games on Saturday.',
    'I slept badly because of the storm.',
    'The coffee machine at the office is broken again.',
    "I'm saving up for a new bike.",
    'Our internet went down for a few hours.',
    'I found an old photo album in the attic.',
    'The kids had a snow day today.',
    "I'm learning a few words of Spanish on an app.",
    'My back is a bit sore from gardening.',
    'We ordered takeaway because nobody wanted to cook.',
    'I finally booked the car in for its service.',
    "There's a new bakery opening down the street.",
    'I forgot my umbrella and got soaked.',
    "I've been listening to a lot of podcasts recently.",
    "We're planning a small party for the weekend.",
    'I need to buy a birthday present for a friend.',
    'The heating in our flat is not working properly.',
    'I spent the evening sorting out old clothes.',
    'I watched the football match with some colleagues.',
    'My inbox is completely out of control.',
    "I'm thinking of taking up yoga again.",
    'We got lost trying to find the restaurant.',
    'I had a long chat with an old school friend.',
    'The printer jammed three times this morning.',
    "I've started going to bed a bit earlier.",
    'We saw a great band at a small venue.',
    "I'm not a big fan of very spicy food.",
    'Work has been quite stressful this month.',
    'I picked up some fresh vegetables at the market.',
    "We're trying to cut down on screen time.",
    'I cleaned out the fridge finally.',
    'The new series everyone talks about is a bit boring.',
    'I signed up for a pottery class.',
    'My sister called me this afternoon.',
    'We went to the beach even though it was windy.',
    'I need to fix the squeaky door in the hallway.',
    'I had a dentist appointment this morning.',
    "I'm really enjoying the longer evenings.",
    'The cat next door keeps visiting our garden.',
    "I've been doing a puzzle with a thousand pieces.",
    'We had a picnic in the park on Sunday.',
    'My flight got delayed by two hours.',
    "I'm trying to be better about saving money.",
    'The dog needed a bath after the muddy walk.',
    'I baked cookies with my nephew.',
    'Our team won the quiz at the pub.',
    'I finally cancelled that gym membership.',
    'We went hiking in the hills last weekend.',
    "Thanks, that's really helpful!",
    'That sounds like a lot of fun.',
    'Good luck with everything this week.',
    "That makes sense, I'll try that.",
    'Oh no, that sounds frustrating.',
    'Have a lovely evening!',
    "Haha, that's so true.",
    'Let me know how it goes.',
    "I'm sorry to hear that, I hope it gets better soon.",
    "That's a great idea, you should go for it.",
    'Sounds like a busy day, make sure to rest a bit.',
    'It might help to make a short list of priorities.',
    'A warm drink and an early night usually help.',
    "Congratulations, that's wonderful news!",
    'Taking a short break every hour can make a difference.',
    "That's a tough choice, both options sound good.",
    'You could try asking a friend to join you.',
    'Enjoy your weekend!',
    'I hope the weather clears up for you.',
    "That's impressive, well done.",
    'Maybe a walk outside would clear your head.',
    "It's normal to feel tired after a week like that.",
    'Did you end up going to the concert?',
    'What are you up to this weekend?',
    'How was your day?',
    'Any plans for the holidays?',
    'I just got back from the shops.',
    'The news today was pretty depressing.',
    "I'm so ready for a holiday.",
    'We had a power cut during dinner.',
)


class Documents(Protocol):
    """What embeds the bank: a :class:`~llama_memory.embeddings.offline.VectorCache`."""

    def documents(self, texts: list[str]) -> list[np.ndarray]:
        """The document vectors of ``texts``."""
        ...


_banks: "weakref.WeakKeyDictionary[Any, np.ndarray]" = weakref.WeakKeyDictionary()
_banks_lock = threading.Lock()


def bank_vectors(vectors: Documents) -> np.ndarray:
    """The unit vectors of :data:`NEUTRAL_CHAT` (one row each), embedded by ``vectors``
    once and kept while it lives."""
    with _banks_lock:
        bank = _banks.get(vectors)
    if bank is None:
        bank = np.stack([unit(v) for v in vectors.documents(list(NEUTRAL_CHAT))])
        with _banks_lock:
            _banks[vectors] = bank
    return bank


def background(vectors: Documents, query_vector: Any) -> float:
    """The question's background: the mean cosine of its :data:`BACKGROUND_TOP` closest
    sentences of the bank (``query_vector`` embedded by the model of ``vectors``)."""
    cosines = bank_vectors(vectors) @ unit(query_vector)
    return float(np.sort(cosines)[-BACKGROUND_TOP:].mean())
