// hf_chat_peer.js — instruction data as Hugging Face prepares it for training,
// to compare with `dtrun tokenize`'s SFT shards: each JSONL line's chat
// rendered by @huggingface/jinja (the Jinja engine transformers.js's
// apply_chat_template runs, with the tokenizer_config.json's special tokens
// as variables and add_generation_prompt false), the text encoded by npm
// `tokenizers` (Hugging Face's Rust library) without special tokens, as
// apply_chat_template encodes it; the loss mask from the encoding's offsets
// (a token counts when it overlaps a trained assistant turn: from the end of
// the conversation before it rendered with add_generation_prompt, to the end
// of its last end-of-turn token), as transformers' assistant mask does.
// Without a template (TEMPLATE none), prompt + completion encoded with the
// post-processor's special tokens, then eos_token (else <|endoftext|>) when
// it adds none after; the completion and that end count.
//   node hf_chat_peer.js TOKENIZERS_DIR JINJA_DIR TOKENIZER.json CONFIG.json TEMPLATE EOT OUT FILE.jsonl...
//   node hf_chat_peer.js TOKENIZERS_DIR JINJA_DIR --jobs JOBS
// TEMPLATE: a file holding the Jinja text, "config" (CONFIG.json's
// chat_template) or "none"; EOT: the template's end-of-turn token. Writes
// OUT.ids (uint32 little-endian), OUT.mask (a byte per id) and OUT.starts
// (each sample's first index, then the total; one a line). JOBS: one job a
// line, its arguments from TOKENIZER.json on separated by tabs (one node
// start for them all; a tokenizer.json is loaded once per real path).
const fs = require('fs');
const path = require('path');
const [tokDir, jinjaDir, ...rest] = process.argv.slice(2);
const { Tokenizer } = require(path.resolve(tokDir));
const { Template } = require(path.resolve(jinjaDir));
const tokenizers = new Map();
function tokenizerOf(file) {
  const key = fs.realpathSync(file);
  if (!tokenizers.has(key)) tokenizers.set(key, Tokenizer.fromFile(file));
  return tokenizers.get(key);
}
const cps = (s) => Array.from(s).length; // offsets count code points

function conversation(o) {
  // [{role, content}], and which of them the loss counts
  if (o.messages) return o.messages.map((m) => ({ ...m, trained: m.role === 'assistant' }));
  if (o.conversations) {
    const role = { system: 'system', human: 'user', gpt: 'assistant', user: 'user', assistant: 'assistant' };
    return o.conversations.map((m) => ({ role: role[m.from], content: m.value, trained: role[m.from] === 'assistant' }));
  }
  if (typeof o.prompt === 'string')
    return [{ role: 'user', content: o.prompt, trained: false }, { role: 'assistant', content: o.completion, trained: true }];
  return [...o.prompt.map((m) => ({ ...m, trained: false })), ...o.completion.map((m) => ({ ...m, trained: m.role === 'assistant' }))];
}

async function job(tokenizerJson, configJson, templateArg, eot, out, files) {
  const tok = tokenizerOf(tokenizerJson);
  const config = fs.existsSync(configJson) ? JSON.parse(fs.readFileSync(configJson, 'utf8')) : {};
  const text = templateArg === 'none' ? null : templateArg === 'config' ? config.chat_template : fs.readFileSync(templateArg, 'utf8');
  const template = text ? new Template(text) : null;
  // transformers' special-token variables (SPECIAL_TOKEN_ATTRIBUTES), strings or {content}
  const specials = {};
  for (const key of ['bos_token', 'eos_token', 'unk_token', 'sep_token', 'pad_token', 'cls_token', 'mask_token']) {
    const v = config[key];
    const s = v && typeof v === 'object' ? v.content : v;
    if (typeof s === 'string') specials[key] = s;
  }
  const render = (messages, add_generation_prompt) => template.render({ messages, add_generation_prompt, ...specials });
  const ids = [], mask = [], starts = [];
  for (const file of files)
    for (const line of fs.readFileSync(file, 'utf8').split('\n')) {
      if (line.trim() === '') continue;
      const o = JSON.parse(line);
      starts.push(ids.length);
      const first = ids.length;
      if (!template) {
        const e = await tok.encode(o.prompt + o.completion, null, { addSpecialTokens: true });
        const special = e.getSpecialTokensMask(), offs = e.getOffsets(), from = cps(o.prompt);
        let seenText = false, after = 0;
        e.getIds().forEach((id, k) => {
          ids.push(id);
          if (special[k] && offs[k][0] === offs[k][1]) { mask.push(seenText ? 1 : 0); after += seenText; return; } // the post-processor's
          seenText = true;
          mask.push(offs[k][1] > from ? 1 : 0);
        });
        if (!after) {
          const eos = specials.eos_token !== undefined ? tok.tokenToId(specials.eos_token) : null;
          ids.push(eos !== null && eos !== undefined ? eos : tok.tokenToId('<|endoftext|>'));
          mask.push(1);
        }
      } else {
        const msgs = conversation(o);
        const plain = msgs.map(({ role, content }) => ({ role, content }));
        const full = render(plain, false);
        const spans = [];
        msgs.forEach((m, i) => {
          if (!m.trained) return;
          // up to the turn's end-of-turn token: Meta-Llama-3-8B's template puts
          // the assistant's header after every conversation, so what follows
          // the turn in `upto` need not be in `full`
          const before = render(plain.slice(0, i), true), upto = render(plain.slice(0, i + 1), false);
          const turn = upto.slice(0, upto.lastIndexOf(eot) + eot.length);
          if (!full.startsWith(before) || !full.startsWith(turn) || turn.length < before.length)
            throw new Error(`${file}: the template is not prefix-stable`);
          spans.push([cps(before), cps(turn)]);
        });
        const e = await tok.encode(full, null, { addSpecialTokens: false });
        const offs = e.getOffsets();
        e.getIds().forEach((id, k) => {
          ids.push(id);
          mask.push(spans.some(([a, b]) => offs[k][0] < b && offs[k][1] > a) ? 1 : 0);
        });
      }
      mask[first] = 0; // nothing predicts a sample's first token
    }
  starts.push(ids.length);
  fs.writeFileSync(out + '.ids', Buffer.from(new Uint32Array(ids).buffer));
  fs.writeFileSync(out + '.mask', Buffer.from(mask));
  fs.writeFileSync(out + '.starts', starts.join('\n') + '\n');
}

(async () => {
  if (rest[0] === '--jobs') {
    for (const line of fs.readFileSync(rest[1], 'utf8').split('\n'))
      if (line !== '') {
        const [t, c, tmpl, eot, out, ...files] = line.split('\t');
        await job(t, c, tmpl, eot, out, files);
      }
  } else {
    const [t, c, tmpl, eot, out, ...files] = rest;
    await job(t, c, tmpl, eot, out, files);
  }
})().catch((e) => { console.error(`hf_chat_peer.js: ${e.message || e}`); process.exit(1); });
