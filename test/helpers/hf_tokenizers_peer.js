// hf_tokenizers_peer.js — Hugging Face's tokenizers (the Rust library's node
// binding, npm `tokenizers`) on the documents of JSONL files, framed as
// `dtrun tokenize --tokenizer` frames them: each document's ids with the
// post-processor's special tokens (encode with addSpecialTokens), and, when
// those are none, the tokenizer's <|endoftext|> before it. Writes the whole
// stream as little-endian uint32 to OUT and prints
// "tokenizers seconds S bytes B docs D tokens T" (S: reading, JSON parsing
// and encoding; not loading the tokenizer, as dtrun's figure).
//   node hf_tokenizers_peer.js PACKAGE_DIR TOKENIZER.json OUT FILE.jsonl...
// With BATCH=1 each file's documents go to encodeBatch at once (Rust's rayon
// threads: RAYON_NUM_THREADS of them), the library's fastest way (and, with
// DECODE, to encodeBatch and decodeBatch); else one encode after the other. With DECODE=FILE it also decodes each document's
// ids (without the frame) and writes the texts, one JSON string a line, to FILE.
const fs = require('fs');
const path = require('path');
const [dir, tokenizerJson, out, ...files] = process.argv.slice(2);
const { Tokenizer } = require(path.resolve(dir));
const tok = Tokenizer.fromFile(tokenizerJson);

(async () => {
  const empty = (await tok.encode('')).getIds();
  const eot = tok.tokenToId('<|endoftext|>');
  const before = empty.length === 0 && eot !== null && eot !== undefined ? [eot] : [];
  const decoded = [];
  const chunks = [];
  let bytes = 0, docs = 0, tokens = 0;
  const t0 = process.hrtime.bigint();
  for (const file of files) {
    const buf = fs.readFileSync(file);
    bytes += buf.length;
    const texts = buf.toString('utf8').split('\n').filter(l => l.trim() !== '').map(l => JSON.parse(l).text);
    const encodings = process.env.BATCH === '1' ? await tok.encodeBatch(texts) : [];
    for (let i = 0; i < texts.length; i++) {
      const ids = (process.env.BATCH === '1' ? encodings[i] : await tok.encode(texts[i])).getIds();
      const a = new Uint32Array(before.length + ids.length);
      a.set(before, 0);
      a.set(ids, before.length);
      chunks.push(a);
      docs++;
      tokens += a.length;
    }
  }
  const secs = Number(process.hrtime.bigint() - t0) / 1e9;
  fs.writeFileSync(out, Buffer.concat(chunks.map(a => Buffer.from(a.buffer, a.byteOffset, a.byteLength))));
  if (process.env.DECODE) {
    for (const file of files) {
      const texts = fs.readFileSync(file, 'utf8').split('\n').filter(l => l.trim() !== '').map(l => JSON.parse(l).text);
      if (process.env.BATCH === '1') {
        const ids = (await tok.encodeBatch(texts, { addSpecialTokens: false })).map(e => e.getIds());
        for (const t of await tok.decodeBatch(ids, false)) decoded.push(JSON.stringify(t));
      } else {
        for (const text of texts) {
          const ids = (await tok.encode(text, null, { addSpecialTokens: false })).getIds();
          decoded.push(JSON.stringify(await tok.decode(ids, false)));
        }
      }
    }
    fs.writeFileSync(process.env.DECODE, decoded.join('\n') + '\n');
  }
  console.log(`tokenizers seconds ${secs.toFixed(4)} bytes ${bytes} docs ${docs} tokens ${tokens}`);
})().catch(e => { console.error(`hf_tokenizers_peer.js: ${e.message || e}`); process.exit(1); });
