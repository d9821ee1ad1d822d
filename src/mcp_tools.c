/* mcp_tools.c — the MCP tools: their names, descriptions, input and output
 * schemas, and how each call becomes requests on the daemon's API socket.
 *
 * Every tool maps to the API method of the same name, with the call's session
 * added. exec and run_code without background are followed by the adapter
 * itself: the execution is started in the background (so its id is known at
 * once and a cancel can name it), then long-polled with get_execution until
 * it ends — with stdout/stderr offsets when the client asked for progress, so
 * new output becomes notifications/progress as it arrives. The daemon's
 * replies are made to conform to the advertised outputSchema.
 *
 * Threads: mcp_tool_run runs on the call's worker thread; the schemas are
 * parsed once (pthread_once) and read-only afterwards. */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "mcp_internal.h"
#include "sandboxd/log.h"
#include "sandboxd/utf8.h"

#define PROGRESS_MESSAGE_MAX 16384
#define REQUEST_TIMEOUT_MS 300000

struct mcp_tool {
        const char *name;
        const char *title;
        const char *description;
        /* JSON with ' standing for " (the schemas read better that way) */
        const char *input;
        const char *output;
        bool read_only, destructive, idempotent;
        const char *wrap; /* a bare array reply goes under this key */
        bool user_level;  /* acts on the user: the connection's default session is not added */
        void (*run)(struct mcp_call *c, const struct mcp_tool *t, struct mcp_tool_result *r);
        cJSON *input_schema, *output_schema;
};

#define SESSION_PROP                                                                                                 \
        "'session':{'type':'string','pattern':'^[A-Za-z0-9_.-]{1,64}$','description':'The sandbox session "        \
        "(container and /workspace) to use. Default: this connection session.'}"

#define IDEM_KEY_PROP                                                                                                \
        "'idempotency_key':{'type':'string','pattern':'^[A-Za-z0-9._:-]{1,128}$','description':'Retry-safe "      \
        "call: a retry with the same key and the same arguments within the idempotency window (24 h by default) "   \
        "returns the result of the first call (or follows its execution) without running anything again; the same "  \
        "key with different arguments is a conflict error.'}"

#define EXEC_ID_PROP "'execution_id':{'type':'string','minLength':1,'description':'Id returned by exec or run_code.'}"

#define EXEC_OUT_PROPS                                                                                               \
        "'execution_id':{'type':'string'},"                                                                          \
        "'state':{'type':'string','description':'pending, running, completed, failed, cancelled or timeout.'},"    \
        "'exit_code':{'anyOf':[{'type':'integer'},{'type':'null'}],'description':'The exit status; null unless the process exited.'}," \
        "'cause':{'anyOf':[{'type':'string'},{'type':'null'}],'description':'Why it ended: exited, timeout, cancelled, oom, "          \
        "container_died, daemon_restarted or error; empty while running.'},"                                        \
        "'stdout':{'type':'string','description':'Output as UTF-8 text; a long stream gives its head and tail "    \
        "around a note of the bytes omitted.'},"                                                                     \
        "'stderr':{'type':'string'},"                                                                                \
        "'stdout_bytes':{'type':'integer','description':'Total bytes written to stdout so far.'},"                  \
        "'stderr_bytes':{'type':'integer'},"                                                                         \
        "'truncated':{'type':'boolean','description':'True when stdout/stderr above are not the whole output.'},"   \
        "'duration_ms':{'anyOf':[{'type':'integer'},{'type':'null'}]},"                                                                 \
        "'via':{'anyOf':[{'type':'string'},{'type':'null'}],'description':'runner (the in-container runner) or docker_exec.'},"       \
        "'usage':{'anyOf':[{'type':'object'},{'type':'null'}],'description':'cpu_user_ms, cpu_system_ms and max_rss_kb of the whole "  \
        "process tree (runner only).'},"                                                                             \
        "'provenance':{'anyOf':[{'type':'object'},{'type':'null'}],'description':'image (id), runtime and runner_version.'},"          \
        "'error':{'anyOf':[{'type':'string'},{'type':'null'}]}"

#define EXEC_OUTPUT "{'type':'object','properties':{" EXEC_OUT_PROPS "},'required':['execution_id','state']}"

#define SERVICE_OUT_PROPS                                                                                            \
        "'name':{'type':'string'},"                                                                                  \
        "'state':{'type':'string','description':'starting, running, stopping, stopped or failed.'},"                \
        "'pid':{'anyOf':[{'type':'integer'},{'type':'null'}]},"                                                                         \
        "'exit_code':{'anyOf':[{'type':'integer'},{'type':'null'}]},"                                                                   \
        "'ports':{'type':'array','description':'TCP ports the service listens on, with the host port each is "     \
        "published on (0 or null when not published).','items':{'type':'object','properties':{"                     \
        "'container_port':{'type':'integer'},'host_port':{'anyOf':[{'type':'integer'},{'type':'null'}]}}}},"                           \
        "'started_at':{'anyOf':[{'type':'integer'},{'type':'null'}]},"                                                         \
        "'stopped_at':{'anyOf':[{'type':'integer'},{'type':'null'}]},"                                                         \
        "'last_error':{'anyOf':[{'type':'string'},{'type':'null'}]}"

#define SERVICE_OUTPUT "{'type':'object','properties':{" SERVICE_OUT_PROPS "},'required':['name','state']}"

static void run_passthrough(struct mcp_call *c, const struct mcp_tool *t, struct mcp_tool_result *r);
static void run_exec(struct mcp_call *c, const struct mcp_tool *t, struct mcp_tool_result *r);

/* ---- agent tools (issue 17): run_tests, the script cache, sessions as tools ---- */

#define NULLABLE(t) "{'anyOf':[{'type':'" t "'},{'type':'null'}]}"
#define NULLABLE_DESC(t, d) "{'anyOf':[{'type':'" t "'},{'type':'null'}],'description':'" d "'}"

#define SCRIPT_NAME_PATTERN "^script-[0-9]{8}T[0-9]{6}Z-[0-9a-f]{12}[.](py|js|sh)$"

#define SCRIPT_PROPS                                                                                                 \
        "'name':{'type':'string'},'content_hash':{'type':'string','description':'SHA-256 of the code (hex).'},"      \
        "'language':{'type':'string'},'description':" NULLABLE_DESC("string", "From the code leading comment.") "," \
        "'bytes':{'type':'integer'},'created_at':{'type':'integer','description':'Unix ms.'}"

#define CACHED_PROPS                                                                                                 \
        "'cached':{'anyOf':[{'type':'object','properties':{" SCRIPT_PROPS "}},{'type':'null'}],'description':'The "   \
        "script cache entry this successful run_code is saved as (an earlier one when the same code was saved "       \
        "before); null when not saved.'},"                                                                           \
        "'cache_error':{'type':'string','description':'Why the run was not saved (the cache is full).'}"

#define SESSION_INFO_PROPS                                                                                           \
        "'session':{'type':'string'},'state':{'type':'string','description':'creating, running, stopped or "         \
        "error.'},'image':" NULLABLE_DESC("string", "Id of the image the container runs.") ",'created_at':{'type':'integer'},'last_activity':{'type':'integer'},"     \
        "'expires_at':" NULLABLE_DESC("integer", "When the TTL ends the session (unix ms); null: no TTL.") ","      \
        "'env_names':{'type':'array','items':{'type':'string'},'description':'Names of the default environment."     \
        "'},'image_name':{'type':'string','description':'The image create_session chose.'}"

static struct mcp_tool agent_tools[] = {
        {
                .name = "run_tests",
                .title = "Run tests",
                .description = "Run a test suite in the session's sandbox and get structured results. python: "
                               "plain test_* functions using assert, and unittest.TestCase classes (unittest.skip "
                               "skips). node: node:test with node:assert. code, if given, runs first (python: as "
                               "module solution, whose names the tests also see; node: the test file is code "
                               "followed by tests). success is true when every test passed or was skipped; a "
                               "crash before any test ran gives success false and error.",
                .input = "{'type':'object','properties':{"
                         "'language':{'type':'string','enum':['python','node']},"
                         "'tests':{'type':'string','minLength':1,'description':'The test source.'},"
                         "'code':{'type':'string','description':'The implementation under test.'},"
                         "'timeout_seconds':{'type':'integer','minimum':1,'description':'For the whole run.'},"
                         SESSION_PROP "},"
                         "'required':['language','tests'],'additionalProperties':false}",
                .output = "{'type':'object','properties':{'success':{'type':'boolean'},"
                          "'summary':{'type':'object','properties':{'total':{'type':'integer'},"
                          "'passed':{'type':'integer'},'failed':{'type':'integer'},'skipped':{'type':'integer'}},"
                          "'required':['total','passed','failed','skipped']},"
                          "'tests':{'type':'array','items':{'type':'object','properties':{'name':{'type':'string'},"
                          "'passed':{'type':'boolean'},'skipped':{'type':'boolean'},'error':" NULLABLE("string") ","
                          "'duration_ms':{'type':'integer'}},'required':['name','passed']}},"
                          "'tests_truncated':{'type':'boolean'},"
                          "'output':{'type':'string','description':'What the code and tests printed (head and "
                          "tail when long).'},"
                          "'duration_ms':{'type':'integer'},'error':" NULLABLE("string") ","
                          "'execution_id':{'type':'string'},'language':{'type':'string'}},"
                          "'required':['success','summary','tests']}",
                .destructive = true,
                .run = run_passthrough,
        },
        {
                .name = "list_scripts",
                .title = "List saved scripts",
                .description = "Your script cache: code of successful run_code calls, newest first, with the "
                               "cache's use of its caps. filter keeps scripts whose name or description contains "
                               "it. Run one with run_code {script: name}.",
                .input = "{'type':'object','properties':{'filter':{'type':'string','maxLength':256},"
                         "'limit':{'type':'integer','minimum':1,'maximum':1000}},'additionalProperties':false}",
                .output = "{'type':'object','properties':{'scripts':{'type':'array','items':{'type':'object',"
                          "'properties':{" SCRIPT_PROPS "}}},'count':{'type':'integer'},'bytes':{'type':'integer'},"
                          "'max_count':{'type':'integer'},'max_bytes':{'type':'integer'}},'required':['scripts']}",
                .read_only = true,
                .idempotent = true,
                .user_level = true,
                .run = run_passthrough,
        },
        {
                .name = "clear_scripts",
                .title = "Remove saved scripts",
                .description = "Remove one saved script (name) or, without a name, your whole script cache.",
                .input = "{'type':'object','properties':{'name':{'type':'string','pattern':'" SCRIPT_NAME_PATTERN
                         "'}},'additionalProperties':false}",
                .output = "{'type':'object','properties':{'removed':{'type':'integer'}},'required':['removed']}",
                .destructive = true,
                .idempotent = true,
                .user_level = true,
                .run = run_passthrough,
        },
        {
                .name = "create_session",
                .title = "Create a session",
                .description = "Start a sandbox session now and return its info. session names it (default: a "
                               "new generated name); ttl_seconds ends it that long from now, as the idle timeout "
                               "does (its workspace stays); image picks one of the images the operator allows; env "
                               "is the default environment of its executions.",
                .input = "{'type':'object','properties':{"
                         "'session':{'type':'string','pattern':'^[A-Za-z0-9_.-]{1,64}$','description':'Name of "
                         "the new session. Default: generated.'},"
                         "'ttl_seconds':{'type':'integer','minimum':1},"
                         "'image':{'type':'string','minLength':1},"
                         "'env':{'type':'object','additionalProperties':{'type':'string'},"
                         "'description':'Default environment variables (at most 64).'}},"
                         "'additionalProperties':false}",
                .output = "{'type':'object','properties':{" SESSION_INFO_PROPS ","
                          "'network_mode':" NULLABLE("string") ",'container_id':" NULLABLE("string") "},"
                          "'required':['session','state']}",
                .user_level = true,
                .run = run_passthrough,
        },
        {
                .name = "destroy_session",
                .title = "Destroy a session",
                .description = "End a session: its running executions are cancelled and its container removed. "
                               "The workspace is kept unless purge is true.",
                .input = "{'type':'object','properties':{"
                         "'session':{'type':'string','pattern':'^[A-Za-z0-9_.-]{1,64}$'},"
                         "'purge':{'type':'boolean','description':'Delete the workspace too.'}},"
                         "'required':['session'],'additionalProperties':false}",
                .output = "{'type':'object','properties':{'session':{'type':'string'},'destroyed':{'type':"
                          "'boolean'},'purged':{'type':'boolean'},'cancelled_executions':{'type':'integer'}},"
                          "'required':['session','destroyed']}",
                .destructive = true,
                .idempotent = false,
                .run = run_passthrough,
        },
        {
                .name = "list_sessions",
                .title = "List sessions",
                .description = "Your sessions, with their state and TTL.",
                .input = "{'type':'object','properties':{},'additionalProperties':false}",
                .output = "{'type':'object','properties':{'sessions':{'type':'array','items':{'type':'object',"
                          "'properties':{" SESSION_INFO_PROPS "}}}},'required':['sessions']}",
                .read_only = true,
                .idempotent = true,
                .user_level = true,
                .run = run_passthrough,
        },
};

static struct mcp_tool tools[] = {
        {
                .name = "exec",
                .title = "Run a shell command",
                .description =
                        "Run a shell command (sh -c) in the session's sandbox container, a non-root Linux "
                        "environment whose working directory /workspace persists. Waits for the end and returns "
                        "exit_code, stdout and stderr (head and tail when long), or with background: true returns "
                        "an execution_id at once to follow with get_execution. A non-zero exit, a timeout or a "
                        "cancel is reported as an error result.",
                .input = "{'type':'object','properties':{"
                         "'command':{'type':'string','minLength':1,'description':'Shell command line.'},"
                         "'timeout_seconds':{'type':'integer','minimum':1,'description':'Kill the command (and "
                         "every process it started) after this many seconds. Default and maximum: the daemon "
                         "configuration.'},"
                         "'workdir':{'type':'string','description':'Working directory; relative paths are under "
                         "/workspace. Default: /workspace.'},"
                         "'env':{'type':'object','additionalProperties':{'type':'string'},'description':'Extra "
                         "environment variables.'},"
                         "'stdin':{'type':'string','description':'Text fed to standard input.'},"
                         "'background':{'type':'boolean','description':'Return at once with the execution_id.'},"
                         "'interactive':{'type':'boolean','description':'Keep stdin open for send_stdin until "
                         "eof.'},"
                         "'tty':{'type':'boolean','description':'Run on a pseudo-terminal (programs see a "
                         "terminal; output comes back as stdout; implies interactive; send_stdin eof sends ^D).'},"
                         "'rows':{'type':'integer','minimum':1,'maximum':1000,'description':'Terminal rows "
                         "(tty). Default 24.'},"
                         "'cols':{'type':'integer','minimum':1,'maximum':1000,'description':'Terminal columns "
                         "(tty). Default 80.'}," IDEM_KEY_PROP "," SESSION_PROP "},"
                         "'required':['command'],'additionalProperties':false}",
                .output = EXEC_OUTPUT,
                .destructive = true,
                .run = run_exec,
        },
        {
                .name = "run_code",
                .title = "Run a code snippet",
                .description = "Run a python, node or bash program in the session's sandbox container (working "
                               "directory /workspace). Same results and options as exec. A run that succeeds is "
                               "saved in your script cache (cached says under which name; cache: false opts "
                               "out); script: NAME runs a saved script instead of code.",
                .input = "{'type':'object','properties':{"
                         "'language':{'type':'string','enum':['python','node','bash'],'description':'Required "
                         "with code.'},"
                         "'code':{'type':'string','minLength':1,'description':'The program text.'},"
                         "'script':{'type':'string','pattern':'" SCRIPT_NAME_PATTERN "','description':'Run this "
                         "saved script (see list_scripts) instead of code.'},"
                         "'cache':{'type':'boolean','description':'Save the code in the script cache if the run "
                         "succeeds. Default true.'},"
                         "'timeout_seconds':{'type':'integer','minimum':1},"
                         "'workdir':{'type':'string'},"
                         "'env':{'type':'object','additionalProperties':{'type':'string'}},"
                         "'stdin':{'type':'string'},"
                         "'background':{'type':'boolean','description':'Return at once with the execution_id.'},"
                         "'interactive':{'type':'boolean','description':'Keep stdin open for send_stdin until "
                         "eof.'}," IDEM_KEY_PROP "," SESSION_PROP "},"
                         "'additionalProperties':false}",
                .output = "{'type':'object','properties':{" EXEC_OUT_PROPS "," CACHED_PROPS "},"
                          "'required':['execution_id','state']}",
                .destructive = true,
                .run = run_exec,
        },
        {
                .name = "get_execution",
                .title = "Follow an execution",
                .description = "State and output of an execution. wait long-polls up to that many seconds (true: "
                               "the longest, 60) for it to end or, with offsets, for output past them; with stdout_offset / "
                               "stderr_offset the output returned starts at those byte offsets.",
                .input = "{'type':'object','properties':{" EXEC_ID_PROP ","
                         "'wait':{'anyOf':[{'type':'integer','minimum':0,'maximum':60},{'type':'boolean'}],"
                         "'description':'Seconds to wait (at most 60), or true for the longest wait.'},"
                         "'stdout_offset':{'type':'integer','minimum':0},"
                         "'stderr_offset':{'type':'integer','minimum':0}," SESSION_PROP "},"
                         "'required':['execution_id'],'additionalProperties':false}",
                .output = "{'type':'object','properties':{" EXEC_OUT_PROPS "," CACHED_PROPS ","
                          "'stdout_offset':{'type':'integer'},'stderr_offset':{'type':'integer'}},"
                          "'required':['execution_id','state']}",
                .read_only = true,
                .idempotent = true,
                .run = run_passthrough,
        },
        {
                .name = "send_stdin",
                .title = "Write to an execution's stdin",
                .description = "Feed text to the standard input of a running interactive execution (started "
                               "with interactive: true); eof: true closes it.",
                .input = "{'type':'object','properties':{" EXEC_ID_PROP ","
                         "'data':{'type':'string'},'eof':{'type':'boolean'}," SESSION_PROP "},"
                         "'required':['execution_id'],'additionalProperties':false}",
                .output = "{'type':'object','properties':{'execution_id':{'type':'string'},"
                          "'bytes':{'type':'integer'},'eof':{'type':'boolean'},'state':{'type':'string'}}}",
                .run = run_passthrough,
        },
        {
                .name = "resize_terminal",
                .title = "Resize an execution's terminal",
                .description = "Change the window size of a running execution started with tty: true (its "
                               "programs get SIGWINCH, as in a resized terminal).",
                .input = "{'type':'object','properties':{" EXEC_ID_PROP ","
                         "'rows':{'type':'integer','minimum':1,'maximum':1000},"
                         "'cols':{'type':'integer','minimum':1,'maximum':1000}," SESSION_PROP "},"
                         "'required':['execution_id','rows','cols'],'additionalProperties':false}",
                .output = "{'type':'object','properties':{'execution_id':{'type':'string'},"
                          "'rows':{'type':'integer'},'cols':{'type':'integer'}},'required':['execution_id']}",
                .idempotent = true,
                .run = run_passthrough,
        },
        {
                .name = "cancel_execution",
                .title = "Cancel an execution",
                .description = "Stop a running execution and every process it started: SIGTERM, then SIGKILL "
                               "after a grace period (force: at once).",
                .input = "{'type':'object','properties':{" EXEC_ID_PROP ","
                         "'force':{'type':'boolean'}," SESSION_PROP "},"
                         "'required':['execution_id'],'additionalProperties':false}",
                .output = "{'type':'object','properties':{" EXEC_OUT_PROPS "}}",
                .destructive = true,
                .idempotent = true,
                .run = run_passthrough,
        },
        {
                .name = "list_executions",
                .title = "List executions",
                .description = "The session's executions, newest first.",
                .input = "{'type':'object','properties':{"
                         "'states':{'type':'array','items':{'type':'string'},'description':'Only these states "
                         "(pending, running, completed, failed, cancelled, timeout).'},"
                         "'limit':{'type':'integer','minimum':1,'maximum':1000},"
                         "'completed_within_ms':{'type':'integer','minimum':0,'description':'Only executions "
                         "that ended within this many milliseconds, the most recently ended first.'},"
                         SESSION_PROP "},"
                         "'additionalProperties':false}",
                .output = "{'type':'object','properties':{'executions':{'type':'array','items':"
                          "{'type':'object','properties':{" EXEC_OUT_PROPS ","
                          "'command_preview':{'anyOf':[{'type':'string'},{'type':'null'}]},"
                          "'created_at':{'anyOf':[{'type':'integer'},{'type':'null'}]}}}}},'required':['executions']}",
                .read_only = true,
                .idempotent = true,
                .wrap = "executions",
                .run = run_passthrough,
        },
        {
                .name = "write_file",
                .title = "Write a file",
                .description = "Create or replace a file in the session's workspace (paths are relative to "
                               "/workspace). encoding base64 writes binary content.",
                .input = "{'type':'object','properties':{"
                         "'path':{'type':'string','minLength':1},"
                         "'content':{'type':'string'},"
                         "'encoding':{'type':'string','enum':['utf8','base64']}," IDEM_KEY_PROP "," SESSION_PROP "},"
                         "'required':['path','content'],'additionalProperties':false}",
                .output = "{'type':'object','properties':{'path':{'type':'string'},'bytes':{'type':'integer'}},"
                          "'required':['path','bytes']}",
                .destructive = true,
                .idempotent = true,
                .run = run_passthrough,
        },
        {
                .name = "read_file",
                .title = "Read a file",
                .description = "Read a file from the session's workspace: at most 1 MiB per call, from offset "
                               "(default 0) for length bytes; size and eof tell whether more remains. Text is "
                               "returned as UTF-8 (valid_utf8 false when bytes had to be replaced); encoding "
                               "base64 returns the raw bytes.",
                .input = "{'type':'object','properties':{"
                         "'path':{'type':'string','minLength':1},"
                         "'offset':{'type':'integer','minimum':0},"
                         "'length':{'type':'integer','minimum':0},"
                         "'encoding':{'type':'string','enum':['utf8','base64']}," SESSION_PROP "},"
                         "'required':['path'],'additionalProperties':false}",
                .output = "{'type':'object','properties':{'path':{'type':'string'},'content':{'type':'string'},"
                          "'encoding':{'type':'string'},'bytes':{'type':'integer'},'size':{'type':'integer'},"
                          "'eof':{'type':'boolean'},'offset':{'type':'integer'},'valid_utf8':{'type':'boolean'}},"
                          "'required':['path','content']}",
                .read_only = true,
                .idempotent = true,
                .run = run_passthrough,
        },
        {
                .name = "list_files",
                .title = "List a directory",
                .description = "List a directory of the session's workspace (default: /workspace).",
                .input = "{'type':'object','properties':{'path':{'type':'string'}," SESSION_PROP "},"
                         "'additionalProperties':false}",
                .output = "{'type':'object','properties':{'path':{'type':'string'},'entries':{'type':'array',"
                          "'items':{'type':'object','properties':{'name':{'type':'string'},'type':{'type':"
                          "'string','description':'file, dir, symlink or other'},'size':{'anyOf':[{'type':"
                          "'integer'},{'type':'null'}]}}}},'truncated':{'type':'boolean'}},'required':['path','entries']}",
                .read_only = true,
                .idempotent = true,
                .run = run_passthrough,
        },
        {
                .name = "start_service",
                .title = "Start a long-running service",
                .description = "Start a long-running process (a web server, a database) in the background under "
                               "a name. The TCP ports it listens on are discovered and published on host ports: "
                               "see list_services or session_info.",
                .input = "{'type':'object','properties':{"
                         "'name':{'type':'string','pattern':'^[A-Za-z0-9_.-]{1,64}$'},"
                         "'command':{'type':'string','minLength':1},"
                         "'workdir':{'type':'string'}," IDEM_KEY_PROP "," SESSION_PROP "},"
                         "'required':['name','command'],'additionalProperties':false}",
                .output = SERVICE_OUTPUT,
                .run = run_passthrough,
        },
        {
                .name = "stop_service",
                .title = "Stop a service",
                .description = "Stop a service: SIGTERM to all its processes, SIGKILL after a grace period.",
                .input = "{'type':'object','properties':{'name':{'type':'string','minLength':1}," SESSION_PROP "},"
                         "'required':['name'],'additionalProperties':false}",
                .output = "{'type':'object','properties':{" SERVICE_OUT_PROPS "}}",
                .destructive = true,
                .idempotent = true,
                .run = run_passthrough,
        },
        {
                .name = "list_services",
                .title = "List services",
                .description = "The session's services with their state, PID and published ports.",
                .input = "{'type':'object','properties':{" SESSION_PROP "},'additionalProperties':false}",
                .output = "{'type':'object','properties':{'services':{'type':'array','items':" SERVICE_OUTPUT "}},"
                          "'required':['services']}",
                .read_only = true,
                .idempotent = true,
                .wrap = "services",
                .run = run_passthrough,
        },
        {
                .name = "service_logs",
                .title = "Read a service's logs",
                .description = "The last lines of a service's stdout and stderr.",
                .input = "{'type':'object','properties':{'name':{'type':'string','minLength':1},"
                         "'tail_lines':{'type':'integer','minimum':1,'maximum':10000}," SESSION_PROP "},"
                         "'required':['name'],'additionalProperties':false}",
                .output = "{'type':'object','properties':{'name':{'type':'string'},'stdout':{'type':'string'},"
                          "'stderr':{'type':'string'}},'required':['name','stdout','stderr']}",
                .read_only = true,
                .idempotent = true,
                .run = run_passthrough,
        },
        {
                .name = "session_info",
                .title = "Describe the session",
                .description = "The session's container state, network mode (none once private data was "
                               "marked on it), and its published ports.",
                .input = "{'type':'object','properties':{" SESSION_PROP "},'additionalProperties':false}",
                .output = "{'type':'object','properties':{'user':{'type':'string'},'session':{'type':'string'},"
                          "'state':{'type':'string','description':'creating, running, stopped or error.'},"
                          "'network_mode':{'anyOf':[{'type':'string'},{'type':'null'}],'description':'none (sealed: "
                          "egress through the proxy, ports forwarded by the daemon; a private session has neither), "
                          "or bridge (the operator chose raw networking).'},"
                          "'runtime':{'anyOf':[{'type':'string'},{'type':'null'}],'description':'OCI runtime of the container: runc, "
                          "or runsc (gVisor, no network).'},"
                          "'private':{'type':'boolean','description':'True once private data was marked on the "
                          "session: its network is then none for good.'},"
                          "'datasets':{'type':'array','items':{'type':'object','properties':{"
                          "'dataset':{'type':'string'},'source':{'anyOf':[{'type':'string'},{'type':'null'}]}}}},"
                          "'ports':{'type':'array','items':{'type':'object',"
                          "'properties':{'container_port':{'type':'integer'},'host_port':{'anyOf':[{'type':"
                          "'integer'},{'type':'null'}]}}}},'container_id':{'anyOf':[{'type':'string'},{'type':'null'}]},"
                          "'created_at':{'anyOf':[{'type':'integer'},{'type':'null'}]},"
                          "'last_activity':{'anyOf':[{'type':'integer'},{'type':'null'}]},"
                          "'last_error':{'anyOf':[{'type':'string'},{'type':'null'}]},"
                          "'egress':{'type':'object','description':'The effective egress policy: mode egress (through "
                          "the proxy; allow lists the patterns and their scope: config, user or session), bridge, or "
                          "none (private).','properties':{'mode':{'type':'string'},'allow':{'type':'array','items':"
                          "{'type':'object','properties':{'pattern':{'type':'string'},'scope':{'type':'string'}}}}}}},"
                          "'required':['state','network_mode','private','ports']}",
                .read_only = true,
                .idempotent = true,
                .run = run_passthrough,
        },
};

#define N_TOOLS (ELEMENTSOF(tools) + ELEMENTSOF(agent_tools))

/* The i-th tool of both tables (i < N_TOOLS). */
static struct mcp_tool *tool_at(size_t i)
{
        return i < ELEMENTSOF(tools) ? &tools[i] : &agent_tools[i - ELEMENTSOF(tools)];
}

static pthread_once_t tools_once = PTHREAD_ONCE_INIT;
static int tools_init_result;

static cJSON *parse_quoted(const char *text)
{
        char *s = strdup(text);
        cJSON *j;

        if (!s)
                return NULL;
        for (char *p = s; *p; p++)
                if (*p == '\'')
                        *p = '"';
        j = cJSON_Parse(s);
        free(s);
        return j;
}

static void tools_init_once(void)
{
        for (size_t i = 0; i < N_TOOLS; i++) {
                struct mcp_tool *t = tool_at(i);
                t->input_schema = parse_quoted(t->input);
                t->output_schema = parse_quoted(t->output);
                if (!cJSON_IsObject(t->input_schema) || !cJSON_IsObject(t->output_schema)) {
                        log_error("mcp: the built-in schema of tool %s does not parse", t->name);
                        tools_init_result = -EINVAL;
                }
        }
}

int mcp_tools_init(void)
{
        pthread_once(&tools_once, tools_init_once);
        return tools_init_result;
}

size_t mcp_tool_count(void) { return N_TOOLS; }

const char *mcp_tool_name(size_t i) { return i < N_TOOLS ? tool_at(i)->name : NULL; }

const struct mcp_tool *mcp_tool_find(const char *name)
{
        for (size_t i = 0; name && i < N_TOOLS; i++)
                if (strcmp(tool_at(i)->name, name) == 0)
                        return tool_at(i);
        return NULL;
}

const cJSON *mcp_tool_input_schema(const struct mcp_tool *t) { return t->input_schema; }

cJSON *mcp_tools_list(int rank)
{
        cJSON *list = cJSON_CreateArray();

        mcp_tools_init();
        for (size_t i = 0; i < N_TOOLS; i++) {
                const struct mcp_tool *t = tool_at(i);
                cJSON *o = cJSON_CreateObject();

                cJSON_AddStringToObject(o, "name", t->name);
                if (rank >= MCP_REV_2025_06_18)
                        cJSON_AddStringToObject(o, "title", t->title);
                cJSON_AddStringToObject(o, "description", t->description);
                cJSON_AddItemToObject(o, "inputSchema", cJSON_Duplicate(t->input_schema, true));
                if (rank >= MCP_REV_2025_06_18)
                        cJSON_AddItemToObject(o, "outputSchema", cJSON_Duplicate(t->output_schema, true));
                if (rank >= MCP_REV_2025_03_26) {
                        cJSON *a = cJSON_AddObjectToObject(o, "annotations");
                        cJSON_AddStringToObject(a, "title", t->title);
                        cJSON_AddBoolToObject(a, "readOnlyHint", t->read_only);
                        if (!t->read_only) {
                                cJSON_AddBoolToObject(a, "destructiveHint", t->destructive);
                                cJSON_AddBoolToObject(a, "idempotentHint", t->idempotent);
                        }
                        /* exec and run_code reach the network unless the session is private */
                        cJSON_AddBoolToObject(a, "openWorldHint", t->run == run_exec);
                }
                cJSON_AddItemToArray(list, o);
        }
        return list;
}

/* ---- talking to the daemon ---- */

static void result_error(struct mcp_tool_result *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void result_error(struct mcp_tool_result *r, const char *fmt, ...)
{
        char buf[1400];
        va_list ap;

        va_start(ap, fmt);
        vsnprintf(buf, sizeof(buf), fmt, ap);
        va_end(ap);
        cJSON_Delete(r->structured);
        r->structured = NULL;
        free(r->text);
        r->text = utf8_sanitize(buf, strlen(buf));
        r->is_error = true;
}

static int open_api(struct mcp_call *c, struct mcp_api **ret, struct mcp_tool_result *r)
{
        struct sbx_error err = {0};
        int k;

        if (!c->m->token[0]) {
                result_error(r, "no API token configured for sandboxd-mcp: set SANDBOXD_TOKEN or pass --token-file");
                return -EPERM;
        }
        k = mcp_api_open(c->m->api_socket, ret, &err);
        if (k < 0) {
                log_warn("mcp: %s", err.msg);
                mcp_call_log(c, MCP_LOG_WARNING, "%s", err.msg);
                result_error(r, "sandboxd is not reachable: %s", err.msg);
        }
        return k;
}

static cJSON *api_params(struct mcp_call *c)
{
        cJSON *p = cJSON_Duplicate(c->args, true);

        if (!p)
                return NULL;
        {
                /* a user-level tool names a session only when the caller did */
                const struct mcp_tool *t = mcp_tool_find(c->tool);
                if (t && t->user_level && !cJSON_GetObjectItemCaseSensitive(c->args, "session"))
                        return p;
        }
        cJSON_DeleteItemFromObjectCaseSensitive(p, "session");
        cJSON_AddStringToObject(p, "session", c->session);
        return p;
}

static int wait_timeout_ms(const cJSON *params)
{
        const cJSON *w = cJSON_GetObjectItemCaseSensitive(params, "wait");
        /* run_tests waits for its whole run: as long as the run may take */
        const cJSON *t = cJSON_GetObjectItemCaseSensitive(params, "timeout_seconds");
        bool bg = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(params, "background"));
        int extra = cJSON_IsNumber(t) && !bg && t->valuedouble > 0 && t->valuedouble < 7 * 86400
                            ? (int)t->valuedouble * 1000
                            : 0;

        if (cJSON_IsTrue(w))
                return REQUEST_TIMEOUT_MS + extra + 60000;
        return REQUEST_TIMEOUT_MS + extra +
               (cJSON_IsNumber(w) && w->valuedouble > 0 && w->valuedouble <= 3600 ? (int)w->valuedouble * 1000 : 0);
}

static void api_failure(struct mcp_call *c, struct mcp_tool_result *r, int k, const struct mcp_api_error *e)
{
        if (k == -EREMOTEIO) {
                result_error(r, "%s: %s", e->code, e->message);
                return;
        }
        log_warn("mcp: %s: %s", c->tool, e->message);
        mcp_call_log(c, MCP_LOG_WARNING, "%s: %s", c->tool, e->message);
        result_error(r, "sandboxd: %s", e->message);
}

/* Shape a reply as the advertised outputSchema says; takes res. */
static void set_structured(const struct mcp_tool *t, struct mcp_tool_result *r, cJSON *res)
{
        const cJSON *sess = cJSON_GetObjectItemCaseSensitive(res, "session");

        /* output cut short: links to the whole of it (not for offset reads) */
        if (!cJSON_GetObjectItemCaseSensitive(res, "stdout_offset") && cJSON_IsString(sess))
                r->links = mcp_resource_links(sess->valuestring, res);
        if (cJSON_IsArray(res) && t->wrap) {
                cJSON *o = cJSON_CreateObject();
                cJSON_AddItemToObject(o, t->wrap, res);
                res = o;
        }
        if (!cJSON_IsObject(res)) {
                cJSON_Delete(res);
                res = cJSON_CreateObject();
        }
        mcp_schema_conform(t->output_schema, res);
        r->structured = res;
}

static void run_passthrough(struct mcp_call *c, const struct mcp_tool *t, struct mcp_tool_result *r)
{
        struct mcp_api *a = NULL;
        struct mcp_api_error e = {0};
        cJSON *params, *res = NULL;
        int k;

        if (open_api(c, &a, r) < 0)
                return;
        params = api_params(c);
        if (!params || mcp_call_attach(c, a) < 0) {
                r->suppress = params != NULL;
                if (!params)
                        result_error(r, "out of memory");
                goto out;
        }
        if (strcmp(t->name, "read_file") == 0) {
                const cJSON *len = cJSON_GetObjectItemCaseSensitive(params, "length");
                if (!cJSON_IsNumber(len) || len->valuedouble > MCP_READ_FILE_MAX) {
                        cJSON_DeleteItemFromObjectCaseSensitive(params, "length");
                        cJSON_AddNumberToObject(params, "length", MCP_READ_FILE_MAX);
                }
        }
        k = mcp_api_request(a, c->m->token, t->name, params, wait_timeout_ms(params), NULL, NULL, &res, &e);
        mcp_call_detach(c);
        if (mcp_call_cancelled(c)) {
                r->suppress = true;
                cJSON_Delete(res);
                goto out;
        }
        if (k < 0) {
                api_failure(c, r, k, &e);
                goto out;
        }
        set_structured(t, r, res);
out:
        cJSON_Delete(params);
        mcp_api_close(a);
}

/* ---- following an execution ---- */

static bool state_is(const cJSON *res, const char *state)
{
        const cJSON *s = cJSON_GetObjectItemCaseSensitive(res, "state");

        return cJSON_IsString(s) && strcasecmp(s->valuestring, state) == 0;
}

static bool state_final(const cJSON *res)
{
        return state_is(res, "COMPLETED") || state_is(res, "FAILED") || state_is(res, "CANCELLED") ||
               state_is(res, "TIMEOUT");
}

static bool execution_failed(const cJSON *res)
{
        const cJSON *code = cJSON_GetObjectItemCaseSensitive(res, "exit_code");

        if (!state_is(res, "COMPLETED"))
                return true;
        return !cJSON_IsNumber(code) || code->valuedouble != 0;
}

/* Carry an incomplete UTF-8 sequence at the end of a chunk into the next. */
struct text_stream {
        unsigned char carry[4];
        size_t carry_len;
};

static size_t incomplete_tail(const unsigned char *s, size_t len)
{
        for (size_t i = 1; i <= 3 && i <= len; i++) {
                unsigned char b = s[len - i];
                size_t need;
                if (b < 0x80)
                        return 0;
                if ((b & 0xC0) == 0x80)
                        continue; /* a continuation byte: look further back */
                need = b >= 0xF0 ? 4 : b >= 0xE0 ? 3 : 2;
                return need > i ? i : 0;
        }
        return 0;
}

/* Append the text of new bytes to *buf (bounded by PROGRESS_MESSAGE_MAX). */
static void text_append(struct text_stream *ts, const unsigned char *data, size_t len, char **buf, size_t *blen,
                        uint64_t *dropped)
{
        unsigned char *joined;
        size_t n = ts->carry_len + len, tail, keep;
        char *clean;

        joined = malloc(n ? n : 1);
        if (!joined)
                return;
        memcpy(joined, ts->carry, ts->carry_len);
        if (len)
                memcpy(joined + ts->carry_len, data, len);
        tail = incomplete_tail(joined, n);
        memcpy(ts->carry, joined + n - tail, tail);
        ts->carry_len = tail;
        n -= tail;
        keep = *blen < PROGRESS_MESSAGE_MAX ? PROGRESS_MESSAGE_MAX - *blen : 0;
        if (n > keep) {
                *dropped += n - keep;
                /* back up to a character boundary */
                while (keep > 0 && (joined[keep] & 0xC0) == 0x80)
                        keep--;
                n = keep;
        }
        clean = utf8_sanitize(joined, n);
        free(joined);
        if (!clean)
                return;
        size_t cl = strlen(clean);
        char *b = realloc(*buf, *blen + cl + 1);
        if (b) {
                memcpy(b + *blen, clean, cl + 1);
                *buf = b;
                *blen += cl;
        }
        free(clean);
}

static size_t decode_stream(const cJSON *res, const char *key, unsigned char **ret)
{
        const cJSON *s = cJSON_GetObjectItemCaseSensitive(res, key);
        size_t n = 0;

        *ret = NULL;
        if (!cJSON_IsString(s) || !*s->valuestring)
                return 0;
        if (base64_decode(s->valuestring, strlen(s->valuestring), ret, &n) < 0) {
                *ret = NULL;
                return 0;
        }
        return n;
}

static uint64_t next_offset(const cJSON *res, const char *key, uint64_t fallback)
{
        const cJSON *n = cJSON_GetObjectItemCaseSensitive(res, key);

        return cJSON_IsNumber(n) && n->valuedouble >= 0 ? (uint64_t)n->valuedouble : fallback;
}

/* Ask the daemon to cancel the call's execution, on a second connection. */
static void cancel_behind(struct mcp_call *c, const char *execution_id)
{
        struct mcp_api *a = NULL;
        struct mcp_api_error e = {0};
        struct sbx_error err = {0};
        cJSON *params, *res = NULL;
        int k;

        if (mcp_api_open(c->m->api_socket, &a, &err) < 0) {
                log_warn("mcp: cannot cancel execution %s: %s", execution_id, err.msg);
                return;
        }
        params = cJSON_CreateObject();
        cJSON_AddStringToObject(params, "session", c->session);
        cJSON_AddStringToObject(params, "execution_id", execution_id);
        k = mcp_api_request(a, c->m->token, "cancel_execution", params, REQUEST_TIMEOUT_MS, NULL, NULL, &res, &e);
        if (k < 0 && strcmp(e.code, "already_finished") != 0)
                log_warn("mcp: cancelling execution %s: %s: %s", execution_id, e.code, e.message);
        else
                log_info("mcp: execution %s cancelled at the client's request", execution_id);
        cJSON_Delete(res);
        cJSON_Delete(params);
        mcp_api_close(a);
}

static void run_exec(struct mcp_call *c, const struct mcp_tool *t, struct mcp_tool_result *r)
{
        const cJSON *bg = cJSON_GetObjectItemCaseSensitive(c->args, "background");
        struct text_stream out_ts = {0}, err_ts = {0};
        struct mcp_api *a = NULL;
        struct mcp_api_error e = {0};
        cJSON *params = NULL, *res = NULL, *poll = NULL;
        const cJSON *idj;
        char id[64];
        uint64_t so = 0, se = 0;
        bool follow_output = c->progress_token != NULL;
        bool may_task = c->tasks_ok; /* a task once it has run MCP_TASK_AFTER_S */
        int64_t started;
        int k, quick = 0;

        if (cJSON_IsTrue(bg) && !c->legacy_task) {
                run_passthrough(c, t, r);
                return;
        }
        if (open_api(c, &a, r) < 0)
                return;
        params = api_params(c);
        if (!params) {
                result_error(r, "out of memory");
                goto out;
        }
        cJSON_DeleteItemFromObjectCaseSensitive(params, "background");
        cJSON_AddTrueToObject(params, "background");

        /* Not attached to the call: cutting the start short (it may include
         * creating the container) could leave an execution we cannot name.
         * A cancel that came meanwhile is honoured right after. */
        k = mcp_api_request(a, c->m->token, t->name, params, REQUEST_TIMEOUT_MS, NULL, NULL, &res, &e);
        if (k < 0) {
                if (mcp_call_cancelled(c))
                        r->suppress = true;
                else
                        api_failure(c, r, k, &e);
                goto out;
        }
        idj = cJSON_GetObjectItemCaseSensitive(res, "execution_id");
        if (!cJSON_IsString(idj) || !*idj->valuestring) {
                result_error(r, "sandboxd: the reply to %s carries no execution_id", t->name);
                goto out;
        }
        sbx_strlcpy(id, idj->valuestring, sizeof(id));
        log_info("mcp: %s started execution %s (session %s)", t->name, id, c->session);
        mcp_call_log(c, MCP_LOG_INFO, "execution %s started", id);
        {
                char note[96];
                snprintf(note, sizeof(note), "execution %s started", id);
                mcp_call_progress(c, 0, note);
        }

        if (c->legacy_task) {
                /* 2025-11-25: asked as a task, answered as one at once (or refused) */
                if (mcp_task_create(c, a, id, r) < 0) {
                        cancel_behind(c, id);
                        r->rpc_code = MCP_INTERNAL_ERROR;
                        snprintf(r->rpc_message, sizeof(r->rpc_message),
                                 "cannot make a task now (too many live tasks?): call without params.task");
                }
                goto out;
        }
        started = sbx_now_ms();
        poll = cJSON_CreateObject();
        cJSON_AddStringToObject(poll, "session", c->session);
        cJSON_AddStringToObject(poll, "execution_id", id);
        cJSON_AddNumberToObject(poll, "wait", may_task ? MCP_TASK_AFTER_S : c->m->poll_wait_s);
        if (follow_output) {
                cJSON_AddStringToObject(poll, "encoding", "base64");
                cJSON_AddNumberToObject(poll, "stdout_offset", 0);
                cJSON_AddNumberToObject(poll, "stderr_offset", 0);
        }
        for (;;) {
                int64_t t0 = sbx_now_ms();
                unsigned char *ob = NULL, *eb = NULL;
                size_t on = 0, en = 0;
                bool final;

                cJSON_Delete(res);
                res = NULL;
                if (mcp_call_attach(c, a) < 0) {
                        cancel_behind(c, id);
                        r->suppress = true;
                        goto out;
                }
                k = mcp_api_request(a, c->m->token, "get_execution", poll, wait_timeout_ms(poll), NULL, NULL, &res,
                                    &e);
                mcp_call_detach(c);
                if (mcp_call_cancelled(c)) {
                        cancel_behind(c, id);
                        r->suppress = true;
                        goto out;
                }
                if (k < 0) {
                        if (k == -EREMOTEIO)
                                result_error(r, "%s: %s (execution %s)", e.code, e.message, id);
                        else
                                result_error(r,
                                             "lost sandboxd while following execution %s (%s); it may still be "
                                             "running: use get_execution",
                                             id, e.message);
                        goto out;
                }
                final = state_final(res);
                if (may_task && !final && sbx_now_ms() - started >= MCP_TASK_AFTER_S * 1000 - 50) {
                        /* Long: hand the client a task instead (else go on in the foreground). */
                        if (mcp_task_create(c, a, id, r) == 0)
                                goto out;
                        may_task = false;
                        cJSON_ReplaceItemInObjectCaseSensitive(poll, "wait", cJSON_CreateNumber(c->m->poll_wait_s));
                }
                if (!follow_output) {
                        if (final)
                                break;
                        continue;
                }
                on = decode_stream(res, "stdout", &ob);
                en = decode_stream(res, "stderr", &eb);
                if (on || en) {
                        char *msg = NULL;
                        size_t mlen = 0;
                        uint64_t dropped = 0;
                        so = next_offset(res, "stdout_next_offset", so + on);
                        se = next_offset(res, "stderr_next_offset", se + en);
                        cJSON_ReplaceItemInObjectCaseSensitive(poll, "stdout_offset", cJSON_CreateNumber((double)so));
                        cJSON_ReplaceItemInObjectCaseSensitive(poll, "stderr_offset", cJSON_CreateNumber((double)se));
                        text_append(&out_ts, ob, on, &msg, &mlen, &dropped);
                        text_append(&err_ts, eb, en, &msg, &mlen, &dropped);
                        if (dropped) {
                                char note[64];
                                snprintf(note, sizeof(note), "\n...[%llu more bytes]", (unsigned long long)dropped);
                                char *b = realloc(msg, mlen + strlen(note) + 1);
                                if (b) {
                                        msg = b;
                                        strcpy(msg + mlen, note);
                                }
                        }
                        mcp_call_progress(c, (double)(so + se), msg ? msg : "");
                        free(msg);
                        quick = 0;
                } else if (!final && sbx_now_ms() - t0 < 200) {
                        /* Nothing new yet no wait either (e.g. output past the
                         * spool cap): do not spin. */
                        if (++quick > 2)
                                sbx_sleep_ms(250);
                }
                free(ob);
                free(eb);
                if (final && !on && !en)
                        break;
        }
        if (follow_output) {
                /* The result proper: head and tail of each stream. */
                cJSON_Delete(res);
                res = NULL;
                cJSON_DeleteItemFromObjectCaseSensitive(poll, "stdout_offset");
                cJSON_DeleteItemFromObjectCaseSensitive(poll, "stderr_offset");
                cJSON_DeleteItemFromObjectCaseSensitive(poll, "encoding");
                cJSON_ReplaceItemInObjectCaseSensitive(poll, "wait", cJSON_CreateNumber(0));
                k = mcp_api_request(a, c->m->token, "get_execution", poll, REQUEST_TIMEOUT_MS, NULL, NULL, &res, &e);
                if (k < 0) {
                        result_error(r, "%s: %s (execution %s)", e.code, e.message, id);
                        goto out;
                }
        }
        r->is_error = execution_failed(res);
        set_structured(t, r, res);
        res = NULL;
out:
        cJSON_Delete(res);
        cJSON_Delete(poll);
        cJSON_Delete(params);
        mcp_api_close(a);
}

void mcp_tool_execution_result(const char *tool, cJSON *res, struct mcp_tool_result *r)
{
        const struct mcp_tool *t = mcp_tool_find(tool);

        if (!t) {
                cJSON_Delete(res);
                result_error(r, "unknown tool %s", tool);
                return;
        }
        r->is_error = execution_failed(res);
        set_structured(t, r, res);
}

void mcp_tool_run(struct mcp_call *c, struct mcp_tool_result *r)
{
        const struct mcp_tool *t = mcp_tool_find(c->tool);

        if (!t) {
                result_error(r, "unknown tool %s", c->tool);
                return;
        }
        t->run(c, t, r);
}
