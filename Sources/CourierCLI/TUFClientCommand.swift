import ArgumentParser
import Courier
import Foundation
import Logging

/// `courier tuf-client`: Courier's TUF client behind the tuf-conformance client-under-test
/// protocol (CLIENT-CLI.md: `init ROOT`, `refresh`, `download`; exit 0 on success, 1 on any
/// failure). Hidden: it exists for `scripts/tuf-client` and the conformance suite.
struct TUFClientCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "tuf-client",
        abstract: "The TUF conformance suite's client-under-test protocol over Courier's TUF client.",
        shouldDisplay: false
    )

    @Option(name: .customLong("metadata-dir"), help: "The trusted metadata folder.")
    var metadataDirectory: String

    @Option(name: .customLong("metadata-url"), help: "The repository's metadata URL.")
    var metadataURL: String?

    @Option(name: .customLong("target-name"), help: "A target path to download (repeatable, in order).")
    var targetNames: [String] = []

    @Option(name: .customLong("target-base-url"), help: "The repository's targets URL.")
    var targetBaseURL: String?

    @Option(name: .customLong("target-dir"), help: "Where downloaded targets go.")
    var targetDirectory: String?

    @OptionGroup var global: GlobalOptions

    @Argument(help: "init ROOT | refresh | download")
    var words: [String] = []

    func run() async throws {
        var logger = global.logger("courier.tuf", default: .info)
        // -v: the client's debug logs (each metadata file and check), as the protocol's clients give.
        if global.verbose { logger.logLevel = .debug }
        do {
            try await perform(logger: logger)
        } catch {
            FileHandle.standardError.write(Data("courier: tuf-client: \(error)\n".utf8))
            throw ExitCode(1)
        }
    }

    private func perform(logger: Logger) async throws {
        let store = try TUFMetadataStore(directory: URL(fileURLWithPath: metadataDirectory))
        let lock = try await store.lock()
        defer { lock.release() }
        switch words.first {
        case "init":
            guard words.count == 2 else { throw ValidationError("init takes one trusted root file") }
            let data = try Data(contentsOf: URL(fileURLWithPath: words[1]))
            // CLIENT-CLI.md: no checks are expected here; the root is checked at every refresh.
            try store.write("root", data)
        case "refresh":
            var updater = try makeUpdater(store: store, logger: logger)
            try await updater.refresh()
        case "download":
            guard let targetDirectory else { throw ValidationError("download needs --target-dir") }
            var updater = try makeUpdater(store: store, logger: logger)
            try await updater.refresh()
            let folder = URL(fileURLWithPath: targetDirectory)
            try DurableFile.makeDirectory(folder)
            for name in targetNames {
                guard let target = try await updater.targetInfo(name) else {
                    throw TUFError(.notFound, "no target \"\(name)\" in the repository")
                }
                // Cached: a file already there with the signed length and hashes is not fetched again.
                let file = folder.appendingPathComponent(TUFMetadataStore.fileName(name).dropLast(5).description)
                if let existing = try? Data(contentsOf: file), (try? target.verify(existing)) != nil { continue }
                let data = try await updater.fetchTarget(target)
                try DurableFile.replace(file, with: data)
            }
        default:
            throw ValidationError("expected init ROOT, refresh or download")
        }
    }

    private func makeUpdater(store: TUFMetadataStore, logger: Logger) throws -> TUFUpdater {
        guard let metadataURL, let url = URL(string: metadataURL) else { throw ValidationError("--metadata-url is needed") }
        // The configuration's transfer settings (proxy, timeouts), as every command's requests.
        let transport = try CourierCore.httpTransport(transfer: global.loadConfiguration().transfer)
        return try TUFUpdater(
            store: store, metadataURL: url, targetsURL: targetBaseURL.flatMap(URL.init(string:)), transport: transport,
            logger: logger)
    }
}
