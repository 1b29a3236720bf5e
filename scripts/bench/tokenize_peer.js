// tokenize_peer.js — the node side of scripts/bench/tokenize.sh: encodes every
// document of the given .jsonl files ("text" field, blank lines skipped) with
// GPT-2's BPE from an npm package, each document preceded by <|endoftext|>
// (50256) as `dtrun tokenize` writes it, and writes the ids as little-endian
// uint16 to OUT. Prints "PEER seconds S bytes B docs D tokens T", where S
// covers reading, JSON parsing and encoding (not loading the package), as
// dtrun's own figure does.
//   node tokenize_peer.js gpt-3-encoder|gpt-tokenizer PACKAGE_DIR OUT FILE.jsonl...
const fs = require('fs');
const path = require('path');
const [peer, dir, out, ...files] = process.argv.slice(2);
const encode = peer === 'gpt-3-encoder'
  ? require(path.resolve(dir, 'Encoder.js')).encode
  : require(path.resolve(dir, 'cjs/encoding/gpt2.js')).encode;
encode('warm up the module');
const t0 = process.hrtime.bigint();
const chunks = [];
let bytes = 0, docs = 0, tokens = 0;
for (const file of files) {
  const buf = fs.readFileSync(file);
  bytes += buf.length;
  for (const line of buf.toString('utf8').split('\n')) {
    if (line.trim() === '') continue;
    const ids = encode(JSON.parse(line).text);
    const a = new Uint16Array(ids.length + 1);
    a[0] = 50256;
    a.set(ids, 1);
    chunks.push(a);
    docs++;
    tokens += a.length;
  }
}
const secs = Number(process.hrtime.bigint() - t0) / 1e9;
const all = Buffer.concat(chunks.map(a => Buffer.from(a.buffer, a.byteOffset, a.byteLength)));
fs.writeFileSync(out, all);
console.log(`${peer} seconds ${secs.toFixed(4)} bytes ${bytes} docs ${docs} tokens ${tokens}`);
