// A miscompile of swiftc 6.3.1 (Linux x86_64) at -O, the cause of the release build's crash on
// every valid receipt (issue 28; the workaround is in ReceiptValidator.validateAllowingRevocation).
//
//   swiftc -parse-as-library -swift-version 6 -O Tests/Toolchain/TupleAcrossSuspension.swift -o /tmp/t && /tmp/t
//
// prints "(0, 1)" where "(7, 1)" is right; -Onone, and -O with `-Xfrontend -disable-llvm-optzns`,
// print "(7, 1)". An async closure whose result is returned indirectly (a Task's or a task group
// child's generic result) builds a tuple whose first element is known before a suspension and
// whose second comes from a `try await` inside `do`/`catch`. After LLVM's optimisations the
// success path stores only the second element: the first, written before the suspension, is
// lost, and the caller reads whatever the result buffer held (0 here; index 0 of every child,
// then "Index out of range", in Courier). Not needed to trigger it: a nested function, an
// `inout` group, a task group (a plain `Task` does it too). Not triggered: the same code in a
// plain async function, `try?` instead of `do`/`catch`, no `catch`, or the awaited value put in
// a local before the tuple is built (the workaround). swiftlang/swift#91911 ("Don't split async
// @out tuple results across suspensions") fixed it and was reverted (#92155) for a fix lower down.
@inline(never) func work() async throws -> Int { 1 }

@main struct Main {
    static func main() async {
        let index = CommandLine.arguments.count + 6  // 7 with no arguments
        let result = await Task {
            do { return (index, try await work()) } catch { return (-1, -1) }
        }.value
        print(result)
    }
}
