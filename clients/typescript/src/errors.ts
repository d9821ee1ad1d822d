// errors.ts — typed errors: one class per API error code.
//
// The daemon answers a failed call with {"error": {"code", "message"}} and
// the HTTP status for the code (src/http/http.c; the codes are
// src/fronterr.c's). `code` is always the API's code string; a code this
// client does not know yet is a plain SandboxdError with that code.

export class SandboxdError extends Error {
        /** The API's error code (`transport` when the daemon was not reached). */
        readonly code: string;
        /** The HTTP status (0 when it came in an SSE error event without one). */
        readonly status: number;
        /** The API method called. */
        readonly method?: string;

        constructor(message: string, code = 'error', status = 0, method?: string) {
                super(method ? `${method}: ${code}: ${message}` : `${code}: ${message}`);
                this.name = new.target.name;
                this.code = code;
                this.status = status;
                this.method = method;
        }
}

/** The daemon could not be reached, or the connection broke mid-call. A
 *  call that broke after it was sent may still have run. */
export class TransportError extends SandboxdError {
        constructor(message: string, method?: string) {
                super(message, 'transport', 0, method);
        }
}

type Ctor = new (message: string, code?: string, status?: number, method?: string) => SandboxdError;

const make = (code: string): Ctor =>
        class extends SandboxdError {
                constructor(message: string, c = code, status = 0, method?: string) {
                        super(message, c, status, method);
                }
        };

export class BadRequestError extends make('bad_request') {}
export class InvalidError extends make('invalid') {}
export class UnauthorizedError extends make('unauthorized') {}
export class ForbiddenError extends make('forbidden') {}
export class NotFoundError extends make('not_found') {}
export class ConflictError extends make('conflict') {}
/** An execution that has already ended (409, a kind of conflict). */
export class AlreadyFinishedError extends ConflictError {
        constructor(message: string, code = 'already_finished', status = 0, method?: string) {
                super(message, code, status, method);
        }
}
export class TooLargeError extends make('too_large') {}
/** A cap was reached (429): wait for something to finish. */
export class BusyError extends make('busy') {}
export class QuotaExceededError extends make('quota_exceeded') {}
export class UnavailableError extends make('unavailable') {}
export class InternalError extends make('internal') {}

export const ERRORS_BY_CODE: Readonly<Record<string, Ctor>> = Object.freeze({
        bad_request: BadRequestError,
        invalid: InvalidError,
        unauthorized: UnauthorizedError,
        forbidden: ForbiddenError,
        not_found: NotFoundError,
        conflict: ConflictError,
        already_finished: AlreadyFinishedError,
        too_large: TooLargeError,
        busy: BusyError,
        quota_exceeded: QuotaExceededError,
        unavailable: UnavailableError,
        internal: InternalError,
});

/** The error for an API code (SandboxdError for an unknown one). */
export function errorFrom(code: string, message: string, status = 0, method?: string): SandboxdError {
        const C = Object.prototype.hasOwnProperty.call(ERRORS_BY_CODE, code) ? ERRORS_BY_CODE[code] : undefined;
        return C ? new C(message, code, status, method) : new SandboxdError(message, code, status, method);
}
