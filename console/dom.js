// dom.js — building the page from daemon data: text goes in through
// textContent only (hostile names, labels and output stay text), and the
// one modal question, a <dialog> (window.confirm would block the page).

/** An element with text (never parsed as HTML) and attributes. */
export function el(tag, text, attrs = {}) {
        const e = document.createElement(tag);
        if (text !== undefined && text !== null) e.textContent = String(text);
        for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
        return e;
}

/** A modal yes/no; resolves true on Confirm. */
export function confirmAction(text) {
        const d = document.getElementById('confirm');
        document.getElementById('confirm-text').textContent = text;
        return new Promise((resolve) => {
                d.addEventListener('close', () => resolve(d.returnValue === 'ok'), { once: true });
                d.returnValue = '';
                d.showModal();
                document.getElementById('confirm-ok').focus();
        });
}
