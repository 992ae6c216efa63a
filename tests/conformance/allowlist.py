"""Which of librdkafka's integration tests (0000-0199) our broker passes, and why the rest
are not listed. A test is a 4-digit number (the runner's `TESTS=` unit: all its
sub-tests). Every number of the range in librdkafka 2.15.0's suite is in exactly one of
ALLOWLIST and NOT_LISTED; run_librdkafka.py refuses to run when one is missing.

Reasons start with a category: `local` (needs no broker), `ssl/sasl`,
`kafka tools` (drives Kafka's shell scripts, KAFKA_PATH), `share groups`, `known issue`
and `kafka 4.0` (the runner or the test skips itself), `pending: <feature>` (being
built; move the test onto the list after it lands and check with `--tests NNNN`; none
is pending now).

Measured on 2 cores (`make conformance`, two clusters: default and noautocreate): the 85
listed tests pass, 87 runs of 87, in 1055 s of wall time; 0081 alone takes about 3.5 min.
Transactions (issue 15) added 0103 (the transactional producer API, about 70 s) and 0129
(fetches around aborted transactions), each seen passing with `--tests 0103,0129`.
"""

from __future__ import annotations

from collections.abc import Iterable

RANGE = ("0000", "0199")


def _numbers(text: str) -> list[str]:
    return text.split()


# Passing in `make conformance` (quick mode, TEST_KAFKA_VERSION=4.0.0); 0045's
# topic-removal sub-tests, 0107 and 0111 in the noautocreate scenario; the last line
# are the socket-emulation (sockem) tests: connection closes, delays, timeouts, retries.
ALLOWLIST: frozenset[str] = frozenset(
    _numbers(
        """
        0001 0002 0003 0005 0007 0008 0011 0012 0013 0014 0015 0016 0017 0018 0019 0020 0021
        0022 0026 0029 0030 0031 0033 0034 0035 0036 0038 0039 0040 0041 0042 0044 0045 0048
        0050 0051 0053 0054 0055 0056 0057 0059 0060 0061 0063 0064 0065 0067 0069 0070 0073
        0081 0082 0083 0084 0085 0086 0089 0090 0091 0093 0099 0101 0102 0107 0110 0111 0112
        0113 0114 0118 0122 0123 0125 0127 0130 0132 0137 0139 0140 0150
        0103 0129
        0049 0068 0075 0076 0088 0094
        """
    )
)

# Run in full mode: 0082 skips itself in quick mode (-Q) and takes seconds anyway; 0102's
# static-membership test (KIP-345) is not a quick one (about a minute).
FULL_MODE: frozenset[str] = frozenset({"0082", "0102"})

_LOCAL = "local: runs without a broker (mock cluster or client-only), says nothing of ours"

NOT_LISTED: dict[str, str] = {
    **{
        n: _LOCAL
        for n in _numbers(
            """
        0000 0004 0006 0009 0025 0037 0043 0046 0058 0062 0066 0072 0074 0078 0079 0080 0095
        0100 0104 0105 0106 0116 0117 0120 0121 0124 0128 0131 0133 0134 0136 0138 0143 0144
        0145 0146 0147 0148 0149 0151 0152 0153 0155 0156 0157 0158 0182 0183 0186
            """
        )
    },
    # Transactions are built (issue 15: 0103 and 0129 are listed); these two need more.
    "0098": "kafka tools: its transactional producer is Kafka's Java TransactionProducerCli "
    "(KAFKA_PATH); without it the test consumes 0 of 9 messages",
    "0177": "share groups: share consumer with transactions (skips itself at Kafka 4.0)",
    # SSL/SASL set-ups the runner expects of its own (trivup) cluster (issue 13 built ours).
    "0097": "ssl/sasl: needs an SSL listener with the suite's certificates",
    "0126": "ssl/sasl: SASL/OAUTHBEARER with an OIDC token endpoint",
    "0135": "ssl/sasl: SASL credentials",
    "0142": "ssl/sasl: SASL re-authentication (KIP-368)",
    # Kafka's own shell tools (KAFKA_PATH) and JMX.
    "0052": "kafka tools: kafka-configs.sh / kafka-topics.sh to set message.timestamp.type",
    "0077": "kafka tools: kafka-topics.sh to create compacted topics",
    "0109": "kafka tools: kafka-configs.sh to turn auto-creation off",
    "0115": "kafka tools: kafka-acls.sh (producer authorization)",
    "0119": "kafka tools: kafka-acls.sh (consumer authorization)",
    # Share groups (KIP-932, Kafka 4.2; TEST_BRKVER 4.2.0): not built.
    **{
        n: "share groups: KIP-932 share consumers are not built (Kafka 4.2)"
        for n in _numbers("0170 0171 0172 0173 0174 0175 0176 0178 0179 0180 0181 0184 0185")
    },
    "0190": "share groups: manual test (TEST_F_MANUAL), share consumer telemetry",
    # The runner itself skips these here.
    "0028": "known issue upstream (TEST_F_KNOWN_ISSUE): the runner filters it out",
    "0047": "known issue upstream (TEST_F_KNOWN_ISSUE): the runner filters it out",
    "0092": "kafka 4.0: the test skips itself (MsgVersion 1 was removed in Kafka 4.0)",
}


def check_complete(suite_numbers: Iterable[str]) -> list[str]:
    """Problems with the lists against the test numbers of the suite."""
    numbers = {n for n in suite_numbers if RANGE[0] <= n <= RANGE[1]}
    problems = [f"{n}: neither allowlisted nor given a reason" for n in
                sorted(numbers - ALLOWLIST - NOT_LISTED.keys())]  # fmt: skip
    problems += [f"{n}: both allowlisted and given a reason" for n in
                 sorted(ALLOWLIST & NOT_LISTED.keys())]  # fmt: skip
    problems += [f"{n}: not a test of this suite" for n in
                 sorted((ALLOWLIST | NOT_LISTED.keys()) - numbers)]  # fmt: skip
    return problems
