"""benchmarks/planes_forms.py's forms of the activation planes give nibbles.activation_planes' bits (its --check)."""
import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "benchmarks"))
import planes_forms  # noqa: E402


def test_every_form_gives_the_same_bits():
  planes_forms.check([1, 3])


def test_a_form_that_differs_is_named(monkeypatch):
  wrong = lambda x, nibble4_in_place=True: planes_forms.planes_transpose(x, not nibble4_in_place)
  monkeypatch.setitem(planes_forms.FORMS, "wrong", wrong)
  with pytest.raises(SystemExit, match="planes form 'wrong' differs from 'transpose' at 1 tokens"):
    planes_forms.check([1])
