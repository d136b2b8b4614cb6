"""torchtitan import: a number torchtitan's int() would refuse is a one-line error, never a
traceback (str.isdigit accepts superscripts such as "²", which int() raises on)."""

import pytest

from planner.inputs.errors import SpecError
from planner.launch.torchtitan.importer import parse_torchtitan

BASE = '[model]\nname = "llama3"\nflavor = "70B"\n[training]\nlocal_batch_size = 1\nseq_len = 4096\n'


@pytest.mark.parametrize("option", ["²", "2²", "0", "-2"])
def test_selective_ac_option_that_is_not_a_decimal_is_an_error(option):
    with pytest.raises(SpecError, match="selective_ac_option.*allowed values: op, or a positive integer"):
        parse_torchtitan(BASE + f'[activation_checkpoint]\nselective_ac_option = "{option}"\n', "j.toml", 16)


@pytest.mark.parametrize("option", ["2", "٢"])
def test_selective_ac_option_decimal_is_read(option):
    """What isdigit and int both take (int reads any Unicode decimal digit) is torchtitan's n."""
    back = parse_torchtitan(
        BASE + f'[activation_checkpoint]\nselective_ac_option = "{option}"\n', "j.toml", 16
    )
    assert back.config.recompute == "full" and back.config.recompute_num_layers > 0
