import ArgumentParser
import Courier
import Foundation
import Logging

/// Shell completion of the ids Courier knows: download and transaction ids from the store (for
/// `pause`, `resume`, `cancel`, `discard`, `status`), product ids from the store's transactions
/// and the catalogs it cached (for `--product`, `content path`…). The generated scripts
/// (`--generate-completion-script`) call back into the binary (`courier ---completion pause --
/// positional@0 …`) with the words typed so far; the store is the one those words name
/// (`--storage`), else the usual one. Reading never creates a store, never goes to the network,
/// and any failure offers nothing rather than an error.
enum IdCompletion {
    /// Which ids a word completes to.
    enum Kind: Sendable {
        /// Download and transaction ids of unfinished transactions (what pause, resume, cancel take).
        case unfinishedIds
        /// Download and transaction ids of every transaction, finished ones too (status, discard).
        case anyIds
        /// Product ids: the store's transactions and its cached catalogs.
        case products
        /// Product ids and content identifiers (what `content` commands take).
        case productsAndContent
    }

    static func kind(_ kind: Kind) -> CompletionKind {
        .custom { words, index, prefix in candidates(kind, words: words, prefix: prefix) }
    }

    /// The candidates for `kind` that start with `prefix`, sorted, from the store `words` name.
    static func candidates(
        _ kind: Kind, words: [String], prefix: String, environment: [String: String] = ProcessInfo.processInfo.environment
    ) -> [String] {
        let layout = StorageLayout.resolve(explicit: storage(in: words), environment: environment)
        var found = Set<String>()
        if layout.storeExists {
            var logger = Logger(label: "courier-completion")
            logger.logLevel = .critical
            let finished = kind != .unfinishedIds
            // The default configuration: a completion reads ids, whatever the file says.
            if let queue = try? CourierCore(configuration: CourierConfiguration(), layout: layout, logger: logger).paymentQueue(),
                let entries = try? queue.entries(includeFinished: finished)
            {
                for entry in entries {
                    switch kind {
                    case .unfinishedIds, .anyIds:
                        found.insert(entry.transactionId)
                        if let id = entry.download?.id { found.insert(id) }
                    case .products:
                        found.insert(entry.productId)
                    case .productsAndContent:
                        found.insert(entry.productId)
                        if let content = entry.download?.contentIdentifier { found.insert(content) }
                    }
                }
            }
        }
        if kind == .products || kind == .productsAndContent {
            for catalog in cachedCatalogs(layout) { found.formUnion(catalog.products.map(\.productId)) }
        }
        return found.filter { $0.hasPrefix(prefix) && !$0.isEmpty }.sorted()
    }

    /// The value of `--storage DIR` or `--storage=DIR` among `words`, if any.
    static func storage(in words: [String]) -> String? {
        var value: String?
        for (index, word) in words.enumerated() {
            if word == "--storage", index + 1 < words.count {
                value = words[index + 1]
            } else if word.hasPrefix("--storage=") {
                value = String(word.dropFirst("--storage=".count))
            }
        }
        // A path typed with a leading ~ is the shell's to expand; as typed here it is not yet.
        if let path = value, path.hasPrefix("~/"), let home = ProcessInfo.processInfo.environment["HOME"] {
            return home + path.dropFirst()
        }
        return value
    }

    /// The catalogs cached under `Storage/Catalogs` (those that decode).
    static func cachedCatalogs(_ layout: StorageLayout) -> [Catalog] {
        let folder = layout.catalogs
        guard let names = try? FileManager.default.contentsOfDirectory(atPath: folder.path) else { return [] }
        return names.filter { $0.hasSuffix(".json") && !$0.hasSuffix(".validators.json") }.sorted().compactMap { name in
            guard let data = try? Data(contentsOf: folder.appendingPathComponent(name)) else { return nil }
            return try? Catalog.decode(data)
        }
    }
}
