// kafkajs transactional producer, driven by tests/txn/test_txn_clients.py:
//   node txn_producer.js <bootstrap> <topic> <transactional.id> <committed-prefix> <aborted-prefix> <count>
// Commits one transaction of <count> records and aborts another, then prints one JSON line.
const { Kafka, logLevel } = require("kafkajs");

async function main() {
  const [bootstrap, topic, txnId, committed, aborted, countArg] = process.argv.slice(2);
  const count = Number(countArg);
  const kafka = new Kafka({ brokers: bootstrap.split(","), clientId: "kafkajs-txn", logLevel: logLevel.ERROR });
  const producer = kafka.producer({ transactionalId: txnId, idempotent: true, maxInFlightRequests: 1 });
  await producer.connect();
  const messages = (prefix) => Array.from({ length: count }, (_, i) => ({ key: `${prefix}-${i}`, value: `${prefix}-${i}` }));

  const t1 = await producer.transaction();
  await t1.send({ topic, messages: messages(committed) });
  await t1.commit();

  const t2 = await producer.transaction();
  await t2.send({ topic, messages: messages(aborted) });
  await t2.abort();

  await producer.disconnect();
  console.log(JSON.stringify({ ok: true, committed: count, aborted: count }));
}

main().catch((err) => {
  console.log(JSON.stringify({ ok: false, error: String(err && err.stack ? err.stack : err) }));
  process.exit(1);
});
