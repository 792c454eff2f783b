"""The admission policy, the log budget and the new settings, without a server."""

import logging

import pytest

from riftco.serve import LimitsError, ServerConfig
from riftco.serve.admission import Admission, client_key
from riftco.serve.cli import _parser
from riftco.serve.connections import ConnectionLimits
from riftco.serve.log_budget import LogBudget, limit_server_logs


class Conn:
    def __init__(self, name: str, idle: bool = True) -> None:
        self.name = name
        self.idle = idle
        self.evicted = False

    def evictable(self) -> bool:
        return self.idle

    def evict(self) -> None:
        self.evicted = True

    def __repr__(self) -> str:
        return self.name


def _admission(cap: int, per_client: int) -> Admission:
    admission = Admission(cap, per_client, fd_reserve=1)
    admission._budget, admission._cap = 10_000, cap
    return admission


def test_per_client_cap_then_global_cap():
    admission = _admission(cap=6, per_client=3)
    a = [Conn(f"a{i}") for i in range(4)]
    assert [admission.admit(c, "10.0.0.1") for c in a] == [None, None, None, "client"]
    assert admission.held_by("10.0.0.1") == 3 and admission.admitted == 3


def test_a_full_server_evicts_the_oldest_idle_connection_of_the_busiest_client():
    admission = _admission(cap=6, per_client=6)
    busy = [Conn("b0", idle=False), Conn("b1"), Conn("b2"), Conn("b3")]
    light = [Conn("l0"), Conn("l1")]
    for c in busy:
        assert admission.admit(c, "b") is None
    for c in light:
        assert admission.admit(c, "l") is None
    newcomer = Conn("n")
    assert admission.admit(newcomer, "n") is None
    assert [c.name for c in busy + light if c.evicted] == ["b1"]  # b0 has a request under way
    assert admission.held_by("b") == 3 and admission.held_by("n") == 1
    assert admission.admitted == 6 and admission.evicted_total == 1


def test_no_eviction_for_a_client_as_busy_as_the_busiest():
    admission = _admission(cap=4, per_client=4)
    for i in range(2):
        assert admission.admit(Conn(f"a{i}"), "a") is None
        assert admission.admit(Conn(f"b{i}"), "b") is None
    assert admission.admit(Conn("a2"), "a") == "server"  # a holds 2, the busiest 2
    assert admission.admit(Conn("c"), "c") is None  # c holds none: b's or a's oldest goes
    assert admission.evicted_total == 1


def test_busy_connections_are_never_evicted():
    admission = _admission(cap=3, per_client=3)
    for i in range(3):
        assert admission.admit(Conn(f"a{i}", idle=False), "a") is None
    assert admission.admit(Conn("n"), "n") == "server"


def test_release_is_idempotent():
    admission = _admission(cap=3, per_client=3)
    conn = Conn("a")
    admission.admit(conn, "a")
    admission.release(conn, "a")
    admission.release(conn, "a")
    assert admission.admitted == 0 and admission.clients == {}


def test_trusted_proxies_skip_the_per_client_cap():
    admission = Admission(8, 2, fd_reserve=1, exempt=frozenset({"10.0.0.9"}))
    admission._budget, admission._cap = 10_000, 8
    assert all(admission.admit(Conn(f"p{i}"), "10.0.0.9") is None for i in range(5))


@pytest.mark.parametrize(
    ("peer", "key"),
    [
        ("127.0.0.1", "127.0.0.1"),
        ("::ffff:10.1.2.3", "10.1.2.3"),
        ("2001:db8:1:2:3:4:5:6", "2001:db8:1:2::/64"),
        ("2001:db8:1:2:ffff::1", "2001:db8:1:2::/64"),
        ("::1", "::1"),
        ("", ""),
    ],
)
def test_client_keys(peer, key):
    assert client_key(peer) == key


def test_log_budget_bounds_records_and_repeated_tracebacks():
    budget = LogBudget(rate=0.0001, burst=5, interval=60.0)
    logger = logging.getLogger("riftco.test.log_budget")
    records = []

    class Keep(logging.Handler):
        def emit(self, record):
            records.append(record)

    handler = Keep()
    logger.addHandler(handler)
    logger.addFilter(budget)
    logger.propagate = False
    try:
        for i in range(1000):
            try:
                raise OSError(24, "Too many open files")
            except OSError:
                logger.error("socket.accept() out of system resource\nsocket: %d", i, exc_info=True)
    finally:
        logger.removeHandler(handler)
        logger.removeFilter(budget)
    assert len(records) == 5 and budget.dropped_total == 995
    assert records[0].exc_info is not None
    assert all(r.exc_info is None for r in records[1:])
    budget.tokens = 1.0
    try:
        raise OSError(24, "Too many open files")
    except OSError:
        import sys

        again = logging.LogRecord(
            "riftco.test.log_budget",
            logging.ERROR,
            __file__,
            1,
            "socket.accept() out of system resource\nsocket: %d",
            (7,),
            sys.exc_info(),
        )
    # The count of dropped records is prefixed, and the repeat still loses its traceback.
    assert budget.filter(again) and again.exc_info is None
    assert again.getMessage().startswith("[995 log records suppressed] socket.accept()")


def test_every_server_logger_gets_one_budget():
    names = ("riftco.serve", "uvicorn", "uvicorn.error", "uvicorn.access", "asyncio")
    try:
        first = limit_server_logs(10.0, 10, 10.0)
        second = limit_server_logs(10.0, 10, 10.0)
        for budget_a, budget_b, name in zip(first, second, names, strict=True):
            filters = [f for f in logging.getLogger(name).filters if isinstance(f, LogBudget)]
            assert filters == [budget_b] and budget_a is not budget_b
    finally:
        for name in names:
            logger = logging.getLogger(name)
            for f in [f for f in logger.filters if isinstance(f, LogBudget)]:
                logger.removeFilter(f)


@pytest.mark.parametrize(
    "field",
    [
        "max_connections_per_client",
        "first_byte_timeout",
        "header_timeout",
        "fd_reserve",
        "log_rate",
    ],
)
def test_new_limits_must_be_positive(field):
    with pytest.raises(LimitsError, match=field):
        ConnectionLimits(**{field: 0})


def test_counts_must_be_integers():
    with pytest.raises(LimitsError, match="max_connections_per_client must be an integer"):
        ConnectionLimits(max_connections_per_client=2.5)


def test_deadlines_nest():
    limits = ConnectionLimits(first_byte_timeout=20, header_timeout=10, request_timeout=5)
    assert [limits.deadline(s) for s in ("first_byte", "headers", "body")] == [5, 5, 5]
    limits = ConnectionLimits()
    assert [limits.deadline(s) for s in ("first_byte", "headers", "body")] == [5.0, 10.0, 30.0]


@pytest.mark.parametrize("value", [0, -1, True, 1.5])
def test_requests_per_client_must_be_a_positive_integer(value):
    with pytest.raises(LimitsError, match="max_requests_per_client"):
        ServerConfig(max_requests_per_client=value)


def test_serve_flags():
    args = _parser().parse_args(
        [
            "m.rift",
            "--max-connections-per-client",
            "8",
            "--max-requests-per-client",
            "4",
            "--first-byte-timeout",
            "2",
            "--header-timeout",
            "3",
            "--fd-reserve",
            "100",
            "--trusted-proxies",
            "10.0.0.1, 10.0.0.2",
        ]
    )
    assert (args.max_connections_per_client, args.max_requests_per_client) == (8, 4)
    assert (args.first_byte_timeout, args.header_timeout, args.fd_reserve) == (2.0, 3.0, 100)
    defaults = _parser().parse_args(["m.rift"])
    assert (defaults.max_connections, defaults.max_connections_per_client) == (512, 64)
    assert (defaults.first_byte_timeout, defaults.header_timeout) == (5.0, 10.0)
