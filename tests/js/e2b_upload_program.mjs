// e2b_upload_program.mjs — uploads through the SDK (issue 36), run by
// e2b.test.mjs with the same variables as e2b_program.mjs and DAEMON_PID:
// a 50 MB file written with files.write and read back (sha256 compared),
// then 1 GiB written as a stream (the SDK sends it chunked, no length),
// which the daemon must refuse early: the bytes the stream gave, the error,
// and the daemon's VmHWM before and after. Prints one JSON line.
import crypto from 'node:crypto';
import fs from 'node:fs';
import { Sandbox } from 'e2b';

const sha = (b) => crypto.createHash('sha256').update(b).digest('hex');
const hwm = () => Number(/VmHWM:\s+(\d+) kB/.exec(fs.readFileSync(`/proc/${process.env.DAEMON_PID}/status`, 'utf8'))[1]) * 1024;

const out = {};
const sbx = await Sandbox.create('base', { metadata: { run: process.env.RUN_TAG } });
try {
        const data = crypto.randomBytes(50 * 1024 * 1024);
        let t = Date.now();
        await sbx.files.write('big50.bin', data);
        out.ms = { write: Date.now() - t }; // for the reader of a slow run, never asserted
        t = Date.now();
        const back = Buffer.from(await sbx.files.read('big50.bin', { format: 'bytes' }));
        out.ms.read = Date.now() - t;
        out.big = { size: back.length, same: sha(back) === sha(data) };

        const GIB = 1024 * 1024 * 1024;
        const chunk = new Uint8Array(1024 * 1024).fill(7);
        let given = 0;
        const stream = new ReadableStream({
                pull(c) {
                        if (given >= GIB) return c.close();
                        given += chunk.length;
                        c.enqueue(chunk.slice());
                },
        }, { highWaterMark: 1 });
        out.hwmBefore = hwm();
        t = Date.now();
        try {
                await sbx.files.write('huge.bin', stream);
                out.huge = 'written';
        } catch (e) {
                out.huge = { name: e.name, message: String(e.message), cause: String(e.cause?.message ?? '') };
        }
        out.hwmAfter = hwm();
        out.ms.huge = Date.now() - t;
        out.given = given;
        out.hugeExists = await sbx.files.exists('huge.bin');
} finally {
        await sbx.kill();
}
console.log(JSON.stringify(out));
