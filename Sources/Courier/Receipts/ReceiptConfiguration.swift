import Foundation

/// Settings of receipt validation (trusted roots, bundle id, environments, verifyReceipt service).
///
/// Every property has a documented default; a key missing from `Config/courier.json` keeps it.
/// The `receipts` section of the file looks like:
/// ```json
/// "receipts": { "trustRoots": ["AppleRootCA-G3.cer"], "bundleId": "com.example.app",
///               "environments": ["Production"], "clockSkew": 300,
///               "verifyReceipt": { "productionURL": "https://buy.itunes.apple.com/verifyReceipt",
///                                  "sandboxURL": "https://sandbox.itunes.apple.com/verifyReceipt",
///                                  "excludeOldTransactions": false, "retries": 3 } }
/// ```
public struct ReceiptConfiguration: Sendable, Codable, Equatable {
    /// Certificates trusted as roots of the signing chain: paths to DER or PEM files (a PEM file
    /// may hold several), relative to the configuration file's folder
    /// (`CourierConfiguration.resolvePath`). Production users list Apple Root CA - G3. A root
    /// carried inside a token is never trusted by itself. Default: none.
    public var trustRoots: [String]
    /// The app's bundle identifier; a transaction for another bundle is refused.
    /// Default `com.example.app` (the sandbox store's default too).
    public var bundleId: String
    /// The App Store environments accepted (`Production`, `Sandbox`). Default `Production`
    /// only: sandbox purchases are free (TestFlight, sandbox accounts), so accepting them for
    /// paid content must be asked for, in the configuration or with `--environment Sandbox`
    /// (an origin that App Review buys from lists both).
    public var environments: Set<String>
    /// Seconds a transaction's `signedDate` may lie in the future (clocks differ). Default 300.
    public var clockSkew: TimeInterval
    /// The verifyReceipt-style service that checks legacy receipts.
    public var verifyReceipt: VerifyReceipt

    /// Settings of the verifyReceipt protocol client (`LegacyReceiptClient`).
    public struct VerifyReceipt: Sendable, Codable, Equatable {
        /// Where every legacy receipt is sent first. Default Apple's production endpoint.
        public var productionURL: String
        /// Where a receipt goes when production answers 21007. Default Apple's sandbox endpoint.
        public var sandboxURL: String
        /// The app's shared secret (`password`); `COURIER_SHARED_SECRET` overrides an absent
        /// value. Never logged, never encoded back into a file. Default none.
        public var sharedSecret: String?
        /// Ask for only the latest renewal of each auto-renewable subscription. Default false.
        public var excludeOldTransactions: Bool
        /// Retries on a retryable status (21002, 21005, 21009, retryable 211xx) or HTTP 5xx.
        /// Default 3.
        public var retries: Int
        /// Seconds before the first retry; doubled each time, capped at 30. Default 1.
        public var retryDelay: TimeInterval
        /// Seconds allowed for one request. Default 30.
        public var timeout: TimeInterval

        public init(
            productionURL: String = "https://buy.itunes.apple.com/verifyReceipt",
            sandboxURL: String = "https://sandbox.itunes.apple.com/verifyReceipt",
            sharedSecret: String? = nil,
            excludeOldTransactions: Bool = false,
            retries: Int = 3,
            retryDelay: TimeInterval = 1,
            timeout: TimeInterval = 30
        ) {
            self.productionURL = productionURL
            self.sandboxURL = sandboxURL
            self.sharedSecret = sharedSecret
            self.excludeOldTransactions = excludeOldTransactions
            self.retries = retries
            self.retryDelay = retryDelay
            self.timeout = timeout
        }

        /// Encodes everything but the shared secret, which stays out of any file Courier writes.
        public func encode(to encoder: any Encoder) throws {
            var c = encoder.container(keyedBy: CodingKeys.self)
            try c.encode(productionURL, forKey: .productionURL)
            try c.encode(sandboxURL, forKey: .sandboxURL)
            try c.encode(excludeOldTransactions, forKey: .excludeOldTransactions)
            try c.encode(retries, forKey: .retries)
            try c.encode(retryDelay, forKey: .retryDelay)
            try c.encode(timeout, forKey: .timeout)
        }

        /// The shared secret: the configured one, else `COURIER_SHARED_SECRET`.
        public func resolvedSharedSecret(
            environment: [String: String] = ProcessInfo.processInfo.environment
        ) -> String? {
            if let sharedSecret, !sharedSecret.isEmpty { return sharedSecret }
            if let value = environment["COURIER_SHARED_SECRET"], !value.isEmpty { return value }
            return nil
        }
    }

    public init(
        trustRoots: [String] = [],
        bundleId: String = "com.example.app",
        environments: Set<String> = ["Production"],
        clockSkew: TimeInterval = 300,
        verifyReceipt: VerifyReceipt = .init()
    ) {
        self.trustRoots = trustRoots
        self.bundleId = bundleId
        self.environments = environments
        self.clockSkew = clockSkew
        self.verifyReceipt = verifyReceipt
    }
}
