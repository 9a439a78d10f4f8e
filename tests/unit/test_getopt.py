"""getopt_long-compatible parser (muster.cli.getopt)."""

from __future__ import annotations

import pytest

from muster.cli.getopt import (
    NO_ARG,
    OPTIONAL,
    REQUIRED,
    CliExit,
    GetoptParser,
    OptSpec,
    UsageError,
)


def specs():
    return [
        OptSpec("t", "time", REQUIRED),
        OptSpec("H", "hold", NO_ARG),
        OptSpec("v", "verbose", NO_ARG, action="count"),
        OptSpec("p", "partition", REQUIRED),
        OptSpec("j", ("jobs", "job"), REQUIRED, action="append"),
        OptSpec(None, "nice", OPTIONAL, convert=int, const=100),
        OptSpec(None, "ntasks", REQUIRED, convert=int),
        OptSpec(None, "ntasks-per-node", REQUIRED, convert=int),
        OptSpec(None, "exclusive", OPTIONAL),
        OptSpec(None, "parsable", NO_ARG),
        OptSpec(None, "parsable2", NO_ARG),
    ]


def parser(stop=False, **kw):
    return GetoptParser("sbatch", specs(), stop_at_positional=stop, **kw)


def values(argv, stop=False):
    return parser(stop).parse_into(argv)


def err(argv, stop=False, **kw) -> UsageError:
    with pytest.raises(UsageError) as ei:
        parser(stop, **kw).parse(argv)
    return ei.value


# -- argument forms ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "argv",
    [["--time=5"], ["--time", "5"], ["-t5"], ["-t", "5"], ["--ti=5"], ["--tim", "5"]],
)
def test_required_argument_forms(argv):
    assert values(argv) == ({"time": "5"}, [])


def test_value_may_start_with_dash_and_contain_equals():
    assert values(["-t", "-5"])[0] == {"time": "-5"}
    assert values(["--time", "--x"])[0] == {"time": "--x"}
    assert values(["--partition=a=b"])[0] == {"partition": "a=b"}
    assert values(["--time="])[0] == {"time": ""}


def test_optional_argument_only_attached():
    assert values(["--nice"])[0] == {"nice": 100}
    assert values(["--nice=5"])[0] == {"nice": 5}
    # a separate word is an operand, not the value
    assert values(["--nice", "5"]) == ({"nice": 100}, ["5"])
    assert values(["--exclusive=user"])[0] == {"exclusive": "user"}
    assert values(["--exclusive"])[0] == {"exclusive": True}


def test_bundled_short_flags():
    v, ops = values(["-Hvv"])
    assert v == {"hold": True, "verbose": 2}
    v, ops = values(["-Hvp", "debug"])
    assert v == {"hold": True, "verbose": 1, "partition": "debug"}
    v, _ = values(["-Hpdebug"])
    assert v == {"hold": True, "partition": "debug"}


def test_count_and_append_and_last_wins():
    v, _ = values(["-v", "--verbose", "-v"])
    assert v["verbose"] == 3
    v, _ = values(["-j", "1", "--jobs=2,3", "--job", "4"])
    assert v["jobs"] == ["1", "2,3", "4"]
    v, _ = values(["-p", "a", "--partition=b"])
    assert v["partition"] == "b"


def test_converter_applied():
    assert values(["--ntasks=4"])[0] == {"ntasks": 4}


# -- abbreviations -------------------------------------------------------------------------------


def test_exact_match_beats_prefix():
    # "ntasks" is both a full name and a prefix of "ntasks-per-node"
    assert values(["--ntasks=2"])[0] == {"ntasks": 2}
    assert values(["--parsable"])[0] == {"parsable": True}


def test_unique_prefix():
    assert values(["--ntasks-per=2"])[0] == {"ntasks_per_node": 2}
    assert values(["--hol"])[0] == {"hold": True}


def test_aliases_of_one_option_are_not_ambiguous():
    # "--jo" matches both "jobs" and "job", the same option
    assert values(["--jo=7"])[0] == {"jobs": ["7"]}


def test_ambiguous_prefix():
    e = err(["--nt=1"])
    assert e.lines[0] == (
        "sbatch: option '--nt=1' is ambiguous; possibilities: '--ntasks' '--ntasks-per-node'"
    )
    assert e.code == 255


# -- operands ------------------------------------------------------------------------------------


def test_permutes_by_default():
    v, ops = values(["a", "-H", "b", "-t", "5", "c"])
    assert v == {"hold": True, "time": "5"}
    assert ops == ["a", "b", "c"]


def test_stop_at_positional():
    v, ops = values(["-H", "script.sh", "-t", "5", "--bogus"], stop=True)
    assert v == {"hold": True}
    assert ops == ["script.sh", "-t", "5", "--bogus"]


def test_double_dash_ends_options():
    v, ops = values(["-H", "--", "-t", "5"])
    assert v == {"hold": True}
    assert ops == ["-t", "5"]
    v, ops = values(["--", "--", "x"], stop=True)
    assert ops == ["--", "x"]


def test_lone_dash_is_operand():
    assert values(["-", "-H"]) == ({"hold": True}, ["-"])
    assert values(["-", "-H"], stop=True) == ({}, ["-", "-H"])


def test_occurrences_keep_order_and_spelling():
    occ, ops = parser().parse(["--hold", "-t", "5", "--part=x"])
    assert [(o.name, o.value, o.dest) for o in occ] == [
        ("--hold", None, "hold"),
        ("-t", "5", "time"),
        ("--partition", "x", "partition"),
    ]


# -- errors --------------------------------------------------------------------------------------


def test_unrecognized_long():
    e = err(["--bogus-option", "--wrap", "true"])
    assert e.lines == [
        "sbatch: unrecognized option '--bogus-option'",
        'Try "sbatch --help" for more information',
    ]
    assert e.code == 255
    assert e.render() == (
        "sbatch: unrecognized option '--bogus-option'\n"
        'Try "sbatch --help" for more information\n'
    )
    assert isinstance(e, CliExit)


def test_unrecognized_long_with_value_shows_whole_word():
    assert err(["--bogus=1"]).lines[0] == "sbatch: unrecognized option '--bogus=1'"


def test_missing_argument_short():
    assert err(["-t"]).lines[0] == "sbatch: option requires an argument -- 't'"


def test_missing_argument_long():
    assert err(["--time"]).lines[0] == "sbatch: option '--time' requires an argument"
    # abbreviation: the message names the full option
    assert err(["--tim"]).lines[0] == "sbatch: option '--time' requires an argument"


def test_invalid_short():
    assert err(["-Z"]).lines[0] == "sbatch: invalid option -- 'Z'"
    assert err(["-HZ"]).lines[0] == "sbatch: invalid option -- 'Z'"


def test_no_argument_allowed():
    assert err(["--hold=1"]).lines[0] == "sbatch: option '--hold' doesn't allow an argument"


def test_error_code_and_hint_configurable():
    e = err(["--bogus-option"], exit_code=1, hint=False)
    assert e.lines == ["sbatch: unrecognized option '--bogus-option'"]
    assert e.code == 1


def test_usage_error_direct():
    e = UsageError("squeue", "unrecognized option '--x'", code=1)
    assert e.lines == ["squeue: unrecognized option '--x'", 'Try "squeue --help" for more information']
    assert e.code == 1


def test_errors_stop_even_after_operand_in_permute_mode():
    assert err(["a", "--bogus"]).lines[0] == "sbatch: unrecognized option '--bogus'"


def test_bad_table():
    with pytest.raises(ValueError):
        GetoptParser("x", [OptSpec("a", "aa"), OptSpec("a", "bb")])
    with pytest.raises(ValueError):
        GetoptParser("x", [OptSpec("a", "aa"), OptSpec("b", "aa")])
    with pytest.raises(ValueError):
        OptSpec("ab", None)
    with pytest.raises(ValueError):
        OptSpec(None, None)
