"""Identity people cannot fool (issue 32): names compare by their TR39 confusable skeleton after
NFKC and case folding, and a name that mixes scripts with look-alikes, holds an invisible mark or
renders blank is refused wherever it enters. The attempts the review found, in one table.
"""

from __future__ import annotations

import pytest

from core.errors import UserError
from core.identity import identity_key, same_identity
from core.limits import check_name

CYR_I, CYR_A = "\u0456", "\u0430"  # і а: Cyrillic look-alikes of Latin i and a

# (what someone tried, the name they used, whom it imitates)
IMITATIONS = [
    ("homoglyph requester", f"r{CYR_I}ta", "rita"),
    ("homoglyph quorum", f"{CYR_A}lice", "alice"),
    ("homoglyph delegate", f"fr{CYR_A}nk", "frank"),
    ("variation selector", "rita\ufe0f", "rita"),
    ("combining grapheme joiner", "bob\u034f", "bob"),
    ("zero-width space", "ri\u200bta", "rita"),
    ("fullwidth", "\uff52\uff49\uff54\uff41", "rita"),
    ("case", "RITA", "rita"),
    ("whole-script Cyrillic", "\u0455\u0430m", "sam"),
]

# names that render blank or hold an invisible or confusably mixed character
REFUSED = {
    "homoglyph": f"r{CYR_I}ta",
    "mixed Cyrillic a": f"{CYR_A}lice",
    "mixed delegate": f"fr{CYR_A}nk",
    "variation selector": "rita\ufe0f",
    "combining grapheme joiner": "bob\u034f",
    "zero-width space": "ri\u200bta",
    "hangul filler": "\u3164",
    "braille blank": "\u2800",
    "hangul choseong and jungseong fillers": "\u115f\u1160",
    "halfwidth hangul filler inside a name": "bo\uffa0b",
    "blank beside a name": "rita \u2800",
}

# real names in one script each (or CJK's usual mixes): accepted as typed
ACCEPTED = [
    "rita",
    "Rita Smith",
    "José Müller",
    "Мария",
    "Ελένη",
    "やまだ太郎",
    "김민준",
    "O’Brien",
]


@pytest.mark.parametrize(
    ("attempt", "name", "imitated"), IMITATIONS, ids=[a for a, *_ in IMITATIONS]
)
def test_an_imitation_is_the_same_identity(attempt, name, imitated):
    assert identity_key(name) == identity_key(imitated)
    assert same_identity(name, imitated)


@pytest.mark.parametrize("name", list(REFUSED.values()), ids=list(REFUSED))
def test_a_name_that_could_fool_a_reader_is_refused_where_it_enters(name):
    with pytest.raises(UserError) as refused:
        check_name(name, "a key's name")
    assert "U+" in str(refused.value) or "scripts" in str(refused.value)


@pytest.mark.parametrize("name", ACCEPTED)
def test_a_plain_name_in_one_script_is_accepted_and_keeps_its_spelling(name):
    assert check_name(name) == name


def test_distinct_people_stay_distinct():
    assert not same_identity("alice", "alicia")
    assert not same_identity("Мария", "Maria")  # a real Cyrillic name is not its transliteration
    assert identity_key("rita") == "rita"  # lower-case ASCII is its own key: stored keys hold
