// gpt2-reference-ids.js — GPT-2 token ids of documents by the npm package
// gpt-3-encoder (the reference for dtrun's tokenizer). One output line per
// document: "NAME id id ...", NAME being FILE for a text file (the whole file is
// one document) and FILE:LINE for a line of a .jsonl file (its "text" field;
// empty lines skipped), as `dtrun tokenize` reads them.
//   node scripts/data/gpt2-reference-ids.js ENCODER_DIR FILE...
const fs = require('fs');
const path = require('path');
const { encode } = require(path.resolve(process.argv[2], 'Encoder.js'));
for (const file of process.argv.slice(3)) {
  const name = path.basename(file);
  const text = fs.readFileSync(file, 'utf8');
  if (file.endsWith('.jsonl')) {
    text.split('\n').forEach((line, i) => {
      if (line.trim() === '') return;
      console.log(`${name}:${i + 1} ${encode(JSON.parse(line).text).join(' ')}`);
    });
  } else {
    console.log(`${name} ${encode(text).join(' ')}`);
  }
}
