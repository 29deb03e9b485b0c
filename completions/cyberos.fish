# Print an optspec for argparse to handle cmd's options that are independent of any subcommand.
function __fish_cyberos_global_optspecs
    string join \n h/help V/version
end

function __fish_cyberos_needs_command
    # Figure out if the current invocation already has a command.
    set -l cmd (commandline -opc)
    set -e cmd[1]
    argparse -s (__fish_cyberos_global_optspecs) -- $cmd 2>/dev/null
    or return
    if set -q argv[1]
        # Also print the command, so this can be used to figure out what it is.
        echo $argv[1]
        return 1
    end
    return 0
end

function __fish_cyberos_using_subcommand
    set -l cmd (__fish_cyberos_needs_command)
    test -z "$cmd"
    and return 1
    contains -- $cmd[1] $argv
end

complete -c cyberos -n "__fish_cyberos_needs_command" -s h -l help -d 'Print help'
complete -c cyberos -n "__fish_cyberos_needs_command" -s V -l version -d 'Print version'
complete -c cyberos -n "__fish_cyberos_needs_command" -f -a "skill" -d 'Validate, sign, list and run skills; watch the broker\'s journal'
complete -c cyberos -n "__fish_cyberos_needs_command" -f -a "tool" -d 'Client used inside a skill to ask the broker for a tool (uses $CYBEROS_BROKER_SOCKET)'
complete -c cyberos -n "__fish_cyberos_needs_command" -f -a "sandbox" -d 'Inspect the sandbox support of this machine'
complete -c cyberos -n "__fish_cyberos_using_subcommand skill; and not __fish_seen_subcommand_from invoke validate scaffold keygen sign list broker" -s h -l help -d 'Print help'
complete -c cyberos -n "__fish_cyberos_using_subcommand skill; and not __fish_seen_subcommand_from invoke validate scaffold keygen sign list broker" -f -a "invoke" -d 'Run a skill\'s `main` in the sandbox and broker its tool calls'
complete -c cyberos -n "__fish_cyberos_using_subcommand skill; and not __fish_seen_subcommand_from invoke validate scaffold keygen sign list broker" -f -a "validate" -d 'Check a bundle\'s SKILL.md against schema v1'
complete -c cyberos -n "__fish_cyberos_using_subcommand skill; and not __fish_seen_subcommand_from invoke validate scaffold keygen sign list broker" -f -a "scaffold" -d 'Create a new skill bundle with a commented starter SKILL.md and main'
complete -c cyberos -n "__fish_cyberos_using_subcommand skill; and not __fish_seen_subcommand_from invoke validate scaffold keygen sign list broker" -f -a "keygen" -d 'Generate an ed25519 key pair (FILE and FILE.pub)'
complete -c cyberos -n "__fish_cyberos_using_subcommand skill; and not __fish_seen_subcommand_from invoke validate scaffold keygen sign list broker" -f -a "sign" -d 'Sign a bundle\'s SKILL.md in place'
complete -c cyberos -n "__fish_cyberos_using_subcommand skill; and not __fish_seen_subcommand_from invoke validate scaffold keygen sign list broker" -f -a "list" -d 'List the skills in the skills directory'
complete -c cyberos -n "__fish_cyberos_using_subcommand skill; and not __fish_seen_subcommand_from invoke validate scaffold keygen sign list broker" -f -a "broker" -d 'Operator view of the broker\'s journal'
complete -c cyberos -n "__fish_cyberos_using_subcommand skill; and __fish_seen_subcommand_from invoke" -l skills-dir -d 'Directory holding skill bundles by id' -r -F
complete -c cyberos -n "__fish_cyberos_using_subcommand skill; and __fish_seen_subcommand_from invoke" -l home -d 'The cyberos home (memory root, journal)' -r -F
complete -c cyberos -n "__fish_cyberos_using_subcommand skill; and __fish_seen_subcommand_from invoke" -l tenant -d 'Tenant UUID recorded on the invocation' -r
complete -c cyberos -n "__fish_cyberos_using_subcommand skill; and __fish_seen_subcommand_from invoke" -l invocation-id -d 'Use this invocation id instead of a new one' -r
complete -c cyberos -n "__fish_cyberos_using_subcommand skill; and __fish_seen_subcommand_from invoke" -l timeout -d 'Shorter budget than the skill\'s effort_minutes (e.g. 90s, 2m, 1500ms)' -r
complete -c cyberos -n "__fish_cyberos_using_subcommand skill; and __fish_seen_subcommand_from invoke" -l sandbox -d 'What to do when a sandbox layer is unavailable' -r -f -a "best-effort\t'Warn once for each sandbox layer this machine lacks, and run anyway'
strict\t'Refuse to run (exit 125) when any sandbox layer is missing'"
complete -c cyberos -n "__fish_cyberos_using_subcommand skill; and __fish_seen_subcommand_from invoke" -l audit -d 'What to do when the journal cannot be written' -r -f -a "best-effort\t'A journal failure is a warning; tool calls still run'
required\t'No tool call runs unaudited: an unusable journal fails the invocation or the call'"
complete -c cyberos -n "__fish_cyberos_using_subcommand skill; and __fish_seen_subcommand_from invoke" -l resolve -d 'Pin HOST:PORT to ADDR for the HTTP tools (as curl --resolve)' -r
complete -c cyberos -n "__fish_cyberos_using_subcommand skill; and __fish_seen_subcommand_from invoke" -l json -d 'Print a JSON summary as the last line on stdout'
complete -c cyberos -n "__fish_cyberos_using_subcommand skill; and __fish_seen_subcommand_from invoke" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c cyberos -n "__fish_cyberos_using_subcommand skill; and __fish_seen_subcommand_from validate" -l broker-version -d 'Check min/max_broker_version against this version instead of the binary\'s' -r
complete -c cyberos -n "__fish_cyberos_using_subcommand skill; and __fish_seen_subcommand_from validate" -l json -d 'Print the result as JSON'
complete -c cyberos -n "__fish_cyberos_using_subcommand skill; and __fish_seen_subcommand_from validate" -s h -l help -d 'Print help'
complete -c cyberos -n "__fish_cyberos_using_subcommand skill; and __fish_seen_subcommand_from scaffold" -l dir -d 'Parent directory of the new bundle (default: the current directory)' -r -F
complete -c cyberos -n "__fish_cyberos_using_subcommand skill; and __fish_seen_subcommand_from scaffold" -s h -l help -d 'Print help'
complete -c cyberos -n "__fish_cyberos_using_subcommand skill; and __fish_seen_subcommand_from keygen" -l out -d 'Private key file to write; the public key goes to FILE.pub' -r -F
complete -c cyberos -n "__fish_cyberos_using_subcommand skill; and __fish_seen_subcommand_from keygen" -s h -l help -d 'Print help'
complete -c cyberos -n "__fish_cyberos_using_subcommand skill; and __fish_seen_subcommand_from sign" -l key -d 'The private key file written by `skill keygen`' -r -F
complete -c cyberos -n "__fish_cyberos_using_subcommand skill; and __fish_seen_subcommand_from sign" -s h -l help -d 'Print help'
complete -c cyberos -n "__fish_cyberos_using_subcommand skill; and __fish_seen_subcommand_from list" -l skills-dir -d 'Directory holding skill bundles by id' -r -F
complete -c cyberos -n "__fish_cyberos_using_subcommand skill; and __fish_seen_subcommand_from list" -l json -d 'Print the list as JSON'
complete -c cyberos -n "__fish_cyberos_using_subcommand skill; and __fish_seen_subcommand_from list" -s h -l help -d 'Print help'
complete -c cyberos -n "__fish_cyberos_using_subcommand skill; and __fish_seen_subcommand_from broker" -s h -l help -d 'Print help'
complete -c cyberos -n "__fish_cyberos_using_subcommand skill; and __fish_seen_subcommand_from broker" -f -a "status" -d 'Active invocations and today\'s counters, as JSON'
complete -c cyberos -n "__fish_cyberos_using_subcommand skill; and __fish_seen_subcommand_from broker" -f -a "tail" -d 'Follow one invocation\'s journal rows as they are written'
complete -c cyberos -n "__fish_cyberos_using_subcommand skill; and __fish_seen_subcommand_from broker" -f -a "replay" -d 'Rebuild an invocation\'s tool-call sequence from the journal'
complete -c cyberos -n "__fish_cyberos_using_subcommand skill; and __fish_seen_subcommand_from broker" -f -a "verify" -d 'Check the journal\'s hash chain (exit 3 when broken)'
complete -c cyberos -n "__fish_cyberos_using_subcommand skill; and __fish_seen_subcommand_from broker" -f -a "prune" -d 'Remove journal rows older than DATE, keeping the chain verifiable'
complete -c cyberos -n "__fish_cyberos_using_subcommand tool; and not __fish_seen_subcommand_from call list" -s h -l help -d 'Print help'
complete -c cyberos -n "__fish_cyberos_using_subcommand tool; and not __fish_seen_subcommand_from call list" -f -a "call" -d 'Call one tool through the broker and print its result JSON'
complete -c cyberos -n "__fish_cyberos_using_subcommand tool; and not __fish_seen_subcommand_from call list" -f -a "list" -d 'List the tools this skill may call'
complete -c cyberos -n "__fish_cyberos_using_subcommand tool; and __fish_seen_subcommand_from call" -s h -l help -d 'Print help'
complete -c cyberos -n "__fish_cyberos_using_subcommand tool; and __fish_seen_subcommand_from list" -s h -l help -d 'Print help'
complete -c cyberos -n "__fish_cyberos_using_subcommand sandbox; and not __fish_seen_subcommand_from check" -s h -l help -d 'Print help'
complete -c cyberos -n "__fish_cyberos_using_subcommand sandbox; and not __fish_seen_subcommand_from check" -f -a "check" -d 'Report which sandbox layers this machine supports'
complete -c cyberos -n "__fish_cyberos_using_subcommand sandbox; and __fish_seen_subcommand_from check" -l json -d 'Print the report as JSON'
complete -c cyberos -n "__fish_cyberos_using_subcommand sandbox; and __fish_seen_subcommand_from check" -s h -l help -d 'Print help'
