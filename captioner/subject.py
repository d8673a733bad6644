"""Does a caption name the photo's subject? The validation metric of the default captioner (issue 20).

Definition (``names_subject``): a caption names the subject of a photo labelled L when, after lower-casing and
reducing each word to its WordNet base form (``dogs`` -> ``dog``, ``mice`` -> ``mouse``), it contains as a
whole word or phrase one of the *subject terms* of L:

1. the label itself when it is a WordNet noun (``eiffel_tower``, ``coffee_cup``), else its head noun: the
   last WordNet noun before the first preposition (``PREPOSITIONS``: of, on, with, ...) that is not in
   ``GENERIC`` (colours, "clipart", "icon" ...): ``"Great Pyramid of Giza"`` -> ``pyramid``, ``"Owl on
   Branch"`` -> ``owl``, ``"red apple"`` -> ``apple``; a label with no such noun (an Italian title) has no
   terms and is left out of the rate;
2. the extra terms a dataset gives the label (``extra``: GCompris' hand-checked synonyms, e.g. ``pliers``
   for ``plier``);
3. for each of those nouns, the synonyms of its first WordNet noun sense and its hypernyms up to
   ``HYPERNYM_DEPTH`` (2) levels up (instance hypernyms included: Taj Mahal -> mausoleum -> tomb; cat ->
   true cat, feline -> carnivore), less ``GENERIC`` (entity, object, animal, artifact, structure, device,
   container ... : a caption that says only "an animal" does not name a giraffe);
4. or a more specific noun: a caption noun whose first WordNet sense has the label's head noun (or one of
   its first-sense synonyms, not its hypernyms) among its hypernyms up to ``HYPONYM_DEPTH`` (8) levels:
   "goldfish" and "tench" name a "fish", "Egyptian cat" names a "cat"; "tiger" does not name a "jaguar".

WordNet is read from Debian's ``wordnet-base`` (``/usr/share/wordnet``, the documented ``wndb(5)`` format).
"""
from __future__ import annotations

import re
from functools import cache, lru_cache
from pathlib import Path

from captioner.errors import CaptionerError

WORDNET_DIR = Path("/usr/share/wordnet")
HYPERNYM_DEPTH = 2
HYPONYM_DEPTH = 8
GENERIC = frozenset("""
entity physical_entity abstraction object whole thing artifact artefact unit part piece matter substance
organism being living_thing animal animate_being beast brute creature fauna person individual someone somebody
mortal soul people plant flora plant_life vascular_plant structure construction device instrumentality
instrumentation container commodity goods consumer_goods covering equipment implement tool? food nutrient
solid foodstuff food_product produce group collection set system line article material stuff item
clip clipart clip_art art icon drawing illustration picture image photo photograph symbol sign cartoon simple
style black white red green blue yellow orange brown grey gray pink purple gold silver color colour light dark
big small little old new top side front back view left right one two three man woman boy girl
vertebrate craniate chordate invertebrate mammal mammalian placental eutherian
""".replace("?", "").split())


# words that end a label's head phrase: what follows them qualifies the subject ("Turkey on Platter")
PREPOSITIONS = frozenset("of on in with at from under over near by for into onto inside behind beside".split())


# Words that begin with a vowel letter but a consonant sound, so they take "a": a European, a unicycle, a U-turn,
# a one-piece.
_CONSONANT_SOUND = re.compile(r"(eu|ewe|uni|use|usu|uti|ure|uro|u-|one\b|once\b)", re.I)


def vowel_sound(word: str) -> bool:
    """Whether ``word`` starts with a vowel sound, as far as its spelling tells: a vowel letter, less the
    consonant sounds of ``_CONSONANT_SOUND`` ("European", "unicycle") and acronyms ("USB")."""
    return bool(word) and word[0].lower() in "aeiou" and not word.isupper() and not _CONSONANT_SOUND.match(word)


def article(noun: str) -> str:
    """"a" or "an" before ``noun``, by the sound of its first word ("an espresso", "a European polecat")."""
    return "an" if vowel_sound(noun.split(" ", 1)[0]) else "a"


def _wn_file(name: str) -> Path:
    p = WORDNET_DIR / name
    if not p.exists():
        raise CaptionerError(f"WordNet not found at {WORDNET_DIR}; run scripts/setup.sh "
                             "(apt-get install wordnet-base)")
    return p


@cache
def _index() -> dict[str, list[int]]:
    """lemma -> noun synset offsets, most frequent sense first (index.noun)."""
    out = {}
    with open(_wn_file("index.noun"), encoding="latin-1") as f:
        for line in f:
            if line.startswith(" "):
                continue
            parts = line.split()
            n_syn, n_ptr = int(parts[2]), int(parts[3])
            out[parts[0]] = [int(x) for x in parts[6 + n_ptr: 6 + n_ptr + n_syn]]
    return out


@cache
def _exceptions() -> dict[str, str]:
    out = {}
    with open(_wn_file("noun.exc"), encoding="latin-1") as f:
        for line in f:
            p = line.split()
            if len(p) >= 2:
                out[p[0]] = p[1]
    return out


@lru_cache(maxsize=50_000)
def _synset(offset: int) -> tuple[tuple[str, ...], tuple[int, ...]]:
    """(lemmas, hypernym offsets) of the noun synset at ``offset`` (a byte offset into data.noun)."""
    with open(_wn_file("data.noun"), "rb") as f:
        f.seek(offset)
        parts = f.readline().decode("latin-1").split(" | ")[0].split()
    n_words = int(parts[3], 16)
    lemmas = tuple(parts[4 + 2 * i].lower() for i in range(n_words))
    k = 4 + 2 * n_words
    n_ptr = int(parts[k])
    hyper = tuple(int(parts[k + 1 + 4 * j + 1]) for j in range(n_ptr) if parts[k + 1 + 4 * j] in ("@", "@i"))
    return lemmas, hyper


def base_form(word: str) -> str:
    """A noun's WordNet base form (morphy's noun rules): ``dogs`` -> ``dog``, ``boxes`` -> ``box``."""
    w = word.lower()
    idx = _index()
    if w in idx:
        return w
    exc = _exceptions().get(w)
    if exc:
        return exc
    for suf, rep in (("ses", "s"), ("xes", "x"), ("zes", "z"), ("ches", "ch"), ("shes", "sh"), ("men", "man"),
                     ("ies", "y"), ("s", "")):
        if w.endswith(suf) and w[: len(w) - len(suf)] + rep in idx:
            return w[: len(w) - len(suf)] + rep
    return w


def _words(text: str) -> list[str]:
    return re.findall(r"[a-z0-9]+", str(text).lower().replace("'s", ""))


def is_noun(word: str) -> bool:
    return base_form(word) in _index()


@lru_cache(maxsize=20_000)
def subject_terms(label: str, extra: tuple = ()) -> frozenset:
    """The terms a caption may use to name a photo labelled ``label`` (see the module docstring), as
    underscore-joined base forms (``measuring_tape``)."""
    words = [base_form(w) for w in _words(label)]
    if words and "_".join(words) in _index():
        heads = {"_".join(words)}
    else:  # the head noun: the last noun before a preposition ("Great Pyramid of Giza" -> pyramid,
        # "Owl on Branch" -> owl)
        cut = next((i for i, w in enumerate(words) if i and w in PREPOSITIONS), len(words))
        nouns = [w for w in words[:cut] if w in _index() and w not in GENERIC and not w.isdigit() and len(w) > 1]
        heads = set(nouns[-1:])
    heads |= {"_".join(base_form(w) for w in _words(e)) for e in extra}
    terms = set(heads)
    for h in heads:
        terms |= _ancestors(h, HYPERNYM_DEPTH)
    return frozenset(t for t in terms if t and t not in GENERIC)


@lru_cache(maxsize=50_000)
def _ancestors(term: str, depth: int = HYPONYM_DEPTH) -> frozenset:
    """Lemmas of the first noun sense of ``term`` and of its hypernyms up to ``depth`` levels."""
    syns = _index().get(term)
    if not syns:
        return frozenset()
    out, frontier = set(), [syns[0]]
    for _ in range(depth + 1):
        nxt = []
        for off in frontier:
            lem, hy = _synset(off)
            out |= set(lem)
            nxt += hy
        frontier = nxt
    return frozenset(out)


@lru_cache(maxsize=20_000)
def _label_synonyms(label: str, extra: tuple = ()) -> frozenset:
    """The label's head nouns and their first-sense synonyms (no hypernyms): what a hyponym must reach."""
    terms = subject_terms(label, extra)
    return frozenset(t for t in terms if any(t in _synset(o)[0] for o in _index().get(t, [])[:1])
                     and t not in _hypernyms_only(label, extra))


def _hypernyms_only(label: str, extra: tuple) -> frozenset:
    words = [base_form(w) for w in _words(label)]
    heads = {"_".join(words)} | set(words) | {"_".join(base_form(w) for w in _words(e)) for e in extra}
    out = set()
    for h in heads:
        syns = _index().get(h)
        if syns:
            lem = set(_synset(syns[0])[0])
            out |= set(_ancestors(h, HYPERNYM_DEPTH)) - lem - heads
    return frozenset(out)


def names_subject(caption: str, label: str, extra: tuple = ()) -> bool:
    """True when ``caption`` contains one of ``subject_terms(label, extra)`` as a word or phrase, or a more
    specific noun whose WordNet hypernyms (up to ``HYPONYM_DEPTH`` levels) reach the label's head noun or one
    of its synonyms ("goldfish" names a "fish")."""
    terms = subject_terms(label, tuple(extra))
    if not terms:
        return False
    words = [base_form(w) for w in _words(caption)]
    grams = set(words)
    for n in (2, 3, 4):
        grams |= {"_".join(words[i:i + n]) for i in range(len(words) - n + 1)}
    if grams & terms:
        return True
    own = _label_synonyms(label, tuple(extra))
    return any(_ancestors(g) & own for g in grams if g not in GENERIC)


def has_subject(label: str, extra: tuple = ()) -> bool:
    """Whether a label has any subject term (titles in other languages or without a noun have none)."""
    return bool(subject_terms(label, tuple(extra)))
